"""``ngym install openenv:<distribution | folder | URL>``: an OpenEnv environment becomes an ngym environment.

1. The environment gets a virtualenv of its own (OpenEnv's requirements — ``fastmcp>=3``, ``gradio`` — and the
   environment's pins never meet ngym's), made once per set of requirements under
   ``$NGYM_CACHE_DIR/openenv-venvs`` (default ``~/.cache/ngym/openenv-venvs``) and reused while it works;
   an install removes the venvs of the installs of its name it replaced (``venv_prune``).
   A URL needs none: the OpenEnv server already runs there.
2. ``probe.py`` runs in it: the distribution's summary and keywords, its app (``openenv.yaml``'s ``app`` for a
   folder, else the module whose ``create_app`` builds it; ``--app`` overrides), and what the app's server says
   of concurrency.
3. The OpenEnv server is started once, as ngym will start it, and asked over ``/ws``: ``reset``, then
   ``list_tools`` (an MCP environment lists its tools; any other is served through ``/step``), and ``/schema``.
4. One example row and one recorded example rollout are made on that server from what the environment declares
   (``ngym_openenv.examples``: reset's observation as the prompt, an action from its schema), or taken from
   ``-o examples=FILE.jsonl``.
5. A small generated distribution ``ngym-openenv-<name>`` (a subclass of ``OpenEnvServer``, its
   ``manifest.json`` and ``data/example*.jsonl``) is pip-installed into ngym's interpreter: ``ngym
   list/run/validate/profile/rollout`` find it by its entry point like any plugin, and ``ngym uninstall NAME``
   removes it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ngym import Domain
from ngym_openenv.catalog import available
from ngym_openenv.environment_venv import (
    environment_venv,
    environments_home,
    folder_requirements,
    pip_into,
    probe,
    venv_root,
)
from ngym_openenv.errors import OpenEnvInstallError
from ngym_openenv.install_server import add_examples, ask_launched, ask_server, read_given_examples
from ngym_openenv.manifest import Manifest, ToolSpec
from ngym_openenv.project import check_name_free, install_project, installed_data_dir
from ngym_openenv.required_env import detect_required_env, package_folder, unset_line
from ngym_openenv.reward import check_rule
from ngym_openenv.venv_prune import prune_replaced

PREFIX = "openenv:"
__all__ = [
    "OpenEnvInstallError",
    "available",
    "install_source",
]  # what ngym_openenv.plugin registers as the openenv: install source
Echo = Callable[[str], None]


def install_source(
    source: str,
    *,
    as_name: str | None = None,
    domain: str | None = None,
    options: dict[str, str] | None = None,
    verbose: bool = False,
    echo: Echo = print,
) -> Manifest:
    """Install ``openenv:<source>`` (the prefix optional) as an ngym environment; its manifest.

    ``options``: ``reward_rule`` (``last``, ``sum`` or ``state:<field>``; default ``last``), ``app``
    (``module:attribute`` of the OpenEnv app, when it cannot be found), ``python`` (serve it from this existing
    interpreter's environment instead of a virtualenv of its own; a folder is pip-installed into it) and
    ``examples`` (a JSONL of recorded rollouts, row + ``response`` + ``reward``, shipped instead of the one
    generated at install).
    """
    if as_name:
        check_name_free(as_name)
    manifest = prepare(source, as_name=as_name, domain=domain, options=options, echo=echo)
    check_name_free(manifest.name)
    install_project(manifest, verbose=verbose)
    _prune_older_venvs(manifest, echo)
    where = manifest.url or manifest.app
    tools = ", ".join(t.name for t in manifest.tools) if manifest.tool_mode == "mcp" else "step"
    echo(
        f"ngym: installed {manifest.name} ({manifest.domain}; {where}; tools: {tools}; "
        f"reward: {manifest.reward_rule}); try: ngym run {manifest.name}"
    )
    data = installed_data_dir(manifest.name)
    if data is not None and manifest.example_rollouts:
        echo(
            f"ngym: example data in {data}: ngym validate {manifest.name}; ngym profile {manifest.name}; "
            f"ngym rollout {manifest.name} --model replay --output out.jsonl"
        )
    return manifest


def prepare(
    source: str,
    *,
    as_name: str | None = None,
    domain: str | None = None,
    options: dict[str, str] | None = None,
    echo: Echo = print,
) -> Manifest:
    """Everything of ``install_source`` but installing the generated distribution: the environment's manifest."""
    source = source.removeprefix(PREFIX).strip()
    if not source:
        raise OpenEnvInstallError("give a source: openenv:<distribution>, openenv:<folder> or openenv:<URL>")
    options = dict(options or {})
    unknown = sorted(set(options) - {"reward_rule", "app", "python", "examples"})
    if unknown:
        raise OpenEnvInstallError(
            f"unknown option {unknown[0]!r} for openenv: sources (known: reward_rule, app, python, examples)"
        )
    given_examples = read_given_examples(options.get("examples") or None)
    try:
        rule = check_rule(options.get("reward_rule") or "last")
    except ValueError as exc:
        raise OpenEnvInstallError(str(exc)) from None
    app = options.get("app") or None
    python = options.get("python") or None
    if python and not Path(python).is_file():
        raise OpenEnvInstallError(f"python={python}: no such interpreter")
    if as_name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", as_name):
        raise OpenEnvInstallError(f"--as {as_name!r}: a name is letters, digits and '_', starting with a letter")
    if re.match(r"^(https?|wss?)://", source):
        manifest = _from_url(source, as_name=as_name, domain=domain, rule=rule, examples=given_examples, echo=echo)
    elif Path(source).is_dir():
        folder = Path(source).resolve()
        manifest = _from_folder(
            folder,
            as_name=as_name,
            domain=domain,
            rule=rule,
            app=app,
            python=python,
            examples=given_examples,
            echo=echo,
        )
    elif Path(source).exists():
        raise OpenEnvInstallError(f"{source}: a folder with an openenv.yaml, a distribution name or a URL is needed")
    else:
        manifest = _from_distribution(
            source,
            as_name=as_name,
            domain=domain,
            rule=rule,
            app=app,
            python=python,
            examples=given_examples,
            echo=echo,
        )
    return manifest


# ---- sources ---------------------------------------------------------------------------------------------


def _from_url(
    url: str, *, as_name: str | None, domain: str | None, rule: str, examples: list[dict[str, Any]] | None, echo: Echo
) -> Manifest:
    echo(f"ngym: asking the OpenEnv server at {url}")
    facts = ask_server(url)
    name = as_name or _ngym_name(str(facts.get("metadata", {}).get("name") or ""))
    if not name:
        raise OpenEnvInstallError(f"{url}: the server does not say its name; give one with --as NAME")
    manifest = _manifest(name, url, facts, {}, domain=_domain(domain, None, {}, name), rule=rule, url=url)
    add_examples(manifest, url, examples, echo)
    return manifest


def _from_folder(
    folder: Path,
    *,
    as_name: str | None,
    domain: str | None,
    rule: str,
    app: str | None,
    python: str | None,
    examples: list[dict[str, Any]] | None,
    echo: Echo,
) -> Manifest:
    spec_file = folder / "openenv.yaml"
    if not spec_file.is_file():
        raise OpenEnvInstallError(f"{folder}: not an OpenEnv environment (no openenv.yaml)")
    try:
        spec = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise OpenEnvInstallError(f"{spec_file}: not valid YAML: {exc}") from None
    if not isinstance(spec, dict):
        raise OpenEnvInstallError(f"{spec_file}: expected a mapping (name:, app:, ...)")
    name = as_name or _ngym_name(str(spec.get("name") or folder.name))
    required = detect_required_env(folder)
    unset = unset_line(name, required)
    if unset:  # install starts it once to record an example: it would fail minutes from now, naming nothing
        raise OpenEnvInstallError(unset)
    # The folder is copied (the environment keeps working when the original moves or changes), into a folder
    # named as a package: OpenEnv's own envs import their models relatively (`from ..models import ...`), which
    # works only when the app is imported as `<package>.server.app`, as OpenEnv's Dockerfiles serve them.
    package = _ngym_name(folder.name) or name
    if not package[0].isalpha():
        package = f"env_{package}"
    shutil.rmtree(environments_home() / name, ignore_errors=True)
    home = environments_home() / name / "src" / package
    shutil.copytree(folder, home, ignore=shutil.ignore_patterns(".venv", "__pycache__", "*.egg-info", "build"))
    requirements = folder_requirements(home, python, echo)
    python = pip_into(python, requirements, echo) if python else environment_venv(name, requirements, home, echo)
    app = app or str(spec.get("app") or "server.app:app")
    above = _named_from_above(app, folder.name)
    if above:  # e.g. agent_world_model_env's `envs.agent_world_model_env.server.app:app`: from OpenEnv's repo root
        root = environments_home() / name / "root"
        shutil.copytree(home, root.joinpath(*above, folder.name))
        echo(f"ngym: {app} is named from above its folder: serving it from {root} laid out as {'/'.join(above)}/")
        home = root
    try:
        facts = probe(python, {"app": app, "app_dir": str(home)})
    except OpenEnvInstallError as exc:
        if "relative import beyond top-level package" not in str(exc):
            raise
        echo(f"ngym: {app} imports relatively: serving it as {package}.{app}, as OpenEnv's Dockerfiles do")
        app, home = f"{package}.{app}", home.parent
        facts = probe(python, {"app": app, "app_dir": str(home)})
    chosen = _domain(domain, spec.get("domain"), facts, name)
    where = {"python": python, "app": app, "app_dir": str(home)}
    manifest = ask_launched(
        python,
        app,
        str(home),
        echo,
        lambda url, more: _finish(name, str(folder), {**facts, **more}, where, chosen, rule, url, examples, echo),
    )
    manifest.required_env = required
    return manifest


def _named_from_above(app: str, folder: str) -> list[str]:
    """The packages above the folder an ``openenv.yaml``'s app names (``envs`` of ``envs.<folder>.server.app``:
    the app is imported from OpenEnv's repository root), else []."""
    parts = app.partition(":")[0].split(".")
    return parts[: parts.index(folder)] if folder in parts[1:-1] else []


def _from_distribution(
    requirement: str,
    *,
    as_name: str | None,
    domain: str | None,
    rule: str,
    app: str | None,
    python: str | None,
    examples: list[dict[str, Any]] | None,
    echo: Echo,
) -> Manifest:
    distribution = re.split(r"[\s<>=!~\[;@]", requirement, maxsplit=1)[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", distribution):
        raise OpenEnvInstallError(f"{requirement!r}: not a distribution name, a folder or a URL")
    name = as_name or _ngym_name(re.sub(r"^openenv[-_]", "", distribution))
    python = pip_into(python, [requirement], echo) if python else environment_venv(name, [requirement], None, echo)
    facts = probe(python, {"distribution": distribution, "app": app})
    if facts.get("error"):
        raise OpenEnvInstallError(f"{distribution}: {facts['error']}; name it with --app module:attribute")
    chosen = _domain(domain, None, facts, name)
    where = {"python": python, "app": facts["app"]}
    folder = package_folder(python, str(facts["app"]))
    required = detect_required_env(folder) if folder is not None else {}
    unset = unset_line(name, required)
    if unset:  # before it is started: it would fail minutes from now with a timeout that names nothing
        raise OpenEnvInstallError(unset)
    manifest = ask_launched(
        python,
        facts["app"],
        None,
        echo,
        lambda url, more: _finish(name, requirement, {**facts, **more}, where, chosen, rule, url, examples, echo),
    )
    manifest.required_env = required
    return manifest


def _finish(
    name: str,
    source: str,
    facts: dict[str, Any],
    where: dict[str, str],
    domain: str,
    rule: str,
    url: str,
    examples: list[dict[str, Any]] | None,
    echo: Echo,
) -> Manifest:
    """The manifest, with example data recorded against the running OpenEnv server at ``url``."""
    manifest = _manifest(name, source, facts, where, domain=domain, rule=rule)
    add_examples(manifest, url, examples, echo)
    return manifest


def _manifest(
    name: str, source: str, facts: dict[str, Any], where: dict[str, str], *, domain: str, rule: str, url: str = ""
) -> Manifest:
    metadata = facts.get("metadata") or {}
    return Manifest(
        name=name,
        source=source,
        domain=domain,
        description=str(metadata.get("description") or facts.get("summary") or ""),
        url=url or None,
        tool_mode="mcp" if facts.get("tools") is not None else "step",
        tools=[ToolSpec.model_validate(t) for t in facts.get("tools") or []],
        action_schema=facts.get("schema", {}).get("action") or {},
        observation_schema=facts.get("schema", {}).get("observation") or {},
        supports_concurrent_sessions=facts.get("supports_concurrent_sessions"),
        requires_single_thread_executor=facts.get("requires_single_thread_executor"),
        max_concurrent_envs=facts.get("max_concurrent_envs"),
        reward_rule=rule,
        openenv_version=facts.get("openenv_version"),
        **where,
    )


def _prune_older_venvs(manifest: Manifest, echo: Echo) -> None:
    """Once the new install is in place: the venvs of the installs of this name it replaced (an edited folder
    gets a new venv), so that reinstalls do not fill the disk. A venv ngym did not make (``-o python=``) or a
    URL install has none of its own."""
    if not manifest.python:
        return
    venv = Path(manifest.python).parent.parent
    if venv.parent.resolve() == venv_root().resolve():
        prune_replaced(venv_root(), manifest.name, venv, echo)


def _ngym_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text.strip()).strip("_").lower()


def _domain(given: str | None, declared: Any, facts: dict[str, Any], name: str) -> str:
    """``--domain``, else the one openenv.yaml (``domain:``) or the package's keywords name, else an error."""
    valid = ", ".join(d.value for d in Domain)
    for value in (given, declared):
        if value:
            try:
                return Domain.parse(str(value)).value
            except ValueError as exc:
                raise OpenEnvInstallError(str(exc)) from None
    named = {k.lower().replace("-", "_") for k in facts.get("keywords") or []} & {d.value for d in Domain}
    if len(named) == 1:
        return str(named.pop())
    why = f"its keywords name several ({', '.join(sorted(named))})" if named else "its package metadata names none"
    raise OpenEnvInstallError(f"{name}: every ngym environment has a domain and {why}: give --domain ({valid})")
