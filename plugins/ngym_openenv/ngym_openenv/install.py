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

import asyncio
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ngym import ConfigError, Domain
from ngym.plugin_api import dataset_row, read_jsonl
from ngym_openenv import examples, launch
from ngym_openenv.catalog import available
from ngym_openenv.errors import OpenEnvInstallError
from ngym_openenv.manifest import Manifest, ToolSpec
from ngym_openenv.project import check_name_free, install_project, installed_data_dir
from ngym_openenv.required_env import detect_required_env, package_folder, unset_line
from ngym_openenv.reward import NoReward, check_rule, episode_reward
from ngym_openenv.venv_prune import prune_replaced
from ngym_openenv.wire import Episode, OpenEnvError

PREFIX = "openenv:"
#: Seconds the OpenEnv server has to answer ``/schema`` and ``/metadata`` at install.
ASK_TIMEOUT = 30.0
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
    given_examples = _read_given_examples(options.get("examples") or None)
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
    facts = _ask_server(url)
    name = as_name or _ngym_name(str(facts.get("metadata", {}).get("name") or ""))
    if not name:
        raise OpenEnvInstallError(f"{url}: the server does not say its name; give one with --as NAME")
    manifest = _manifest(name, url, facts, {}, domain=_domain(domain, None, {}, name), rule=rule, url=url)
    _add_examples(manifest, url, examples, echo)
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
    shutil.rmtree(_home() / name, ignore_errors=True)
    home = _home() / name / "src" / package
    shutil.copytree(folder, home, ignore=shutil.ignore_patterns(".venv", "__pycache__", "*.egg-info", "build"))
    requirements = _folder_requirements(home, python, echo)
    python = _pip_into(python, requirements, echo) if python else _environment_venv(name, requirements, home, echo)
    app = app or str(spec.get("app") or "server.app:app")
    above = _named_from_above(app, folder.name)
    if above:  # e.g. agent_world_model_env's `envs.agent_world_model_env.server.app:app`: from OpenEnv's repo root
        root = _home() / name / "root"
        shutil.copytree(home, root.joinpath(*above, folder.name))
        echo(f"ngym: {app} is named from above its folder: serving it from {root} laid out as {'/'.join(above)}/")
        home = root
    try:
        facts = _probe(python, {"app": app, "app_dir": str(home)})
    except OpenEnvInstallError as exc:
        if "relative import beyond top-level package" not in str(exc):
            raise
        echo(f"ngym: {app} imports relatively: serving it as {package}.{app}, as OpenEnv's Dockerfiles do")
        app, home = f"{package}.{app}", home.parent
        facts = _probe(python, {"app": app, "app_dir": str(home)})
    chosen = _domain(domain, spec.get("domain"), facts, name)
    where = {"python": python, "app": app, "app_dir": str(home)}
    manifest = _ask_launched(
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
    python = _pip_into(python, [requirement], echo) if python else _environment_venv(name, [requirement], None, echo)
    facts = _probe(python, {"distribution": distribution, "app": app})
    if facts.get("error"):
        raise OpenEnvInstallError(f"{distribution}: {facts['error']}; name it with --app module:attribute")
    chosen = _domain(domain, None, facts, name)
    where = {"python": python, "app": facts["app"]}
    folder = package_folder(python, str(facts["app"]))
    required = detect_required_env(folder) if folder is not None else {}
    unset = unset_line(name, required)
    if unset:  # before it is started: it would fail minutes from now with a timeout that names nothing
        raise OpenEnvInstallError(unset)
    manifest = _ask_launched(
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
    _add_examples(manifest, url, examples, echo)
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


# ---- the environment's virtualenv ----------------------------------------------------------------------------


def _home() -> Path:
    """Where installed OpenEnv environments keep their files (inside ngym's interpreter's prefix)."""
    return Path(sys.prefix) / "share" / "ngym" / "openenv"


def venv_root() -> Path:
    from ngym.plugin_api import cache_dir

    return cache_dir() / "openenv-venvs"


def _folder_requirements(folder: Path, python: str | None, echo: Echo) -> list[str]:
    """What to pip-install for a folder: the folder itself when its project suits the interpreter, else its
    ``server/requirements.txt`` (what OpenEnv's Dockerfiles install), with OpenEnv when that does not name it."""
    project = folder / "pyproject.toml"
    requirements = folder / "server" / "requirements.txt"
    if project.is_file() or (folder / "setup.py").is_file():
        refused = _python_refused(project, python)
        if refused is None or not requirements.is_file():
            # A project that leaves OpenEnv out (openapp_env's: "installed by the Dockerfile separately") gets it
            # from the index, as the image's base would give it.
            return [str(folder), *([] if _names_openenv(project) else ["openenv"])]
        echo(f"ngym: {refused}: installing server/requirements.txt instead, as OpenEnv's Dockerfiles do")
    if requirements.is_file():
        named = re.findall(r"^\s*(openenv(?:[-_]core)?)\b", requirements.read_text(encoding="utf-8"), re.MULTILINE)
        return ["-r", str(requirements), *([] if named else ["openenv"])]
    return ["openenv"]


def _names_openenv(project: Path) -> bool:
    """Whether the project's dependencies name OpenEnv (``openenv``, ``openenv-core``, with extras or a URL);
    a ``setup.py`` project, or one that cannot be read, is taken to."""
    try:
        dependencies = tomllib.loads(project.read_text(encoding="utf-8")).get("project", {}).get("dependencies")
    except (OSError, tomllib.TOMLDecodeError):
        return True
    if dependencies is None:
        return True  # dynamic (or setup.py) dependencies: not ours to second-guess
    return any(re.match(r"\s*openenv(?:[-_]core)?\s*(?:[\[<>=!~;@ ]|$)", str(d)) for d in dependencies)


def _python_refused(project: Path, python: str | None) -> str | None:
    """Why the project's ``requires-python`` excludes the interpreter it would be installed into, else None."""
    try:
        wanted = tomllib.loads(project.read_text(encoding="utf-8")).get("project", {}).get("requires-python")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    if not wanted:
        return None
    if python:
        version = _run([python, "-c", "import platform; print(platform.python_version())"]).stdout.strip()
    else:
        version = ".".join(map(str, sys.version_info[:3]))
    try:
        if Version(version) in SpecifierSet(str(wanted)):
            return None
    except (InvalidSpecifier, InvalidVersion):
        return None
    return f"its pyproject.toml requires Python {wanted} and this is {version}"


def _environment_venv(name: str, requirements: list[str], folder: Path | None, echo: Echo) -> str:
    """The interpreter of a virtualenv holding ``requirements``, made once and reused while it imports openenv."""
    key = hashlib.sha256(json.dumps(requirements).encode())
    if folder is not None:  # a folder's requirements are its files: a changed folder is a new venv
        for file in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            key.update(str(file.relative_to(folder)).encode() + file.read_bytes())
    where = venv_root() / f"{name}-{key.hexdigest()[:12]}"
    python = where / "bin" / "python"
    ready = where / ".ngym-ready"
    if ready.is_file() and _run([str(python), "-c", "import openenv, uvicorn"]).returncode == 0:
        echo(f"ngym: reusing {where}")
        return str(python)
    echo(f"ngym: making {where} with {' '.join(requirements)} (a minute or a few)")
    shutil.rmtree(where, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(where)
    result = _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *requirements, "uvicorn"])
    if result.returncode:
        log = where / "pip.log"
        log.write_text(result.stdout, encoding="utf-8")
        raise OpenEnvInstallError(
            f"{_target(requirements)} cannot be installed here: {pip_reason(result.stdout)} (pip's output: {log})"
        )
    ready.write_text(json.dumps(requirements) + "\n", encoding="utf-8")
    return str(python)


def _pip_into(python: str, requirements: list[str], echo: Echo) -> str:
    """Install ``requirements`` into an existing interpreter's environment (``-o python=...``)."""
    echo(f"ngym: installing {' '.join(requirements)} into {python}'s environment")
    result = _run([python, "-m", "pip", "install", "--disable-pip-version-check", *requirements])
    if result.returncode:
        tail = "\n  ".join(result.stdout.splitlines()[-15:])
        raise OpenEnvInstallError(
            f"{_target(requirements)} cannot be installed with {python}: {pip_reason(result.stdout)}\n  {tail}"
        )
    return python


def _target(requirements: list[str]) -> str:
    """What was being installed, shortly: a folder's name, a requirements file's folder, or the requirements."""
    if requirements[:1] == ["-r"] and len(requirements) > 1:
        return f"{Path(requirements[1]).parent.parent.name} (its server/requirements.txt)"
    if requirements and Path(requirements[0]).is_dir():
        return Path(requirements[0]).name
    return " ".join(requirements)


#: pip's words for why an install failed, and how to say it in one line (first match wins).
_PIP_REASONS = (
    (
        re.compile(r"unable to access '([^']+)'.*Could not resolve host", re.I),
        "it needs {0}, which cannot be reached from here",
    ),
    (re.compile(r"Could not resolve host: (\S+)", re.I), "it needs {0}, which cannot be reached from here"),
    (
        re.compile(r"No matching distribution found for (\S+)"),
        "{0} is not on the package index for this Python/platform",
    ),
    (re.compile(r"Package '([^']+)' requires a different Python: (.+)"), "{0} does not support this Python ({1})"),
    (re.compile(r"ResolutionImpossible|conflicting dependencies", re.I), "its requirements conflict with each other"),
    (re.compile(r"Failed to build (.+)"), "{0} failed to build (a compiler or system library may be missing)"),
)


def pip_reason(output: str) -> str:
    """One line saying why pip failed (a host it cannot reach, a package not on the index, ...), from its output."""
    for pattern, words in _PIP_REASONS:
        found = pattern.search(output)
        if found:
            return words.format(*(g.strip() for g in found.groups()))
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR:")]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return (errors[0] if errors else lines[-1] if lines else "pip failed without output").removeprefix("ERROR: ")


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _probe(python: str, request: dict[str, Any]) -> dict[str, Any]:
    result = _run([python, str(Path(__file__).with_name("probe.py")), json.dumps(request)])
    marker = next((line for line in reversed(result.stdout.splitlines()) if line.startswith("NGYM-PROBE ")), None)
    if result.returncode or marker is None:
        tail = "\n  ".join(result.stdout.splitlines()[-15:])
        raise OpenEnvInstallError(f"the environment's app could not be imported:\n  {tail}")
    facts: dict[str, Any] = json.loads(marker.removeprefix("NGYM-PROBE "))
    if facts.get("import_error"):
        which = f"{Path(python).parent.parent.name}-{request.get('app')}"  # the venv's name: one file per environment
        log = venv_root() / f"import-error-{re.sub(r'[^A-Za-z0-9_.-]+', '_', which)}.log"
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(str(facts.get("traceback") or ""), encoding="utf-8")
            kept = f" (traceback: {log})"
        except OSError:
            kept = ""
        raise OpenEnvInstallError(
            f"the environment's app {request.get('app')} could not be imported: {facts['import_error']}{kept}"
        )
    return facts


# ---- example data ----------------------------------------------------------------------------------------


def _read_given_examples(path: str | None) -> list[dict[str, Any]] | None:
    """``-o examples=FILE.jsonl``: recorded rollouts (row + ``response`` + ``reward``) to ship instead."""
    if path is None:
        return None
    try:
        lines = read_jsonl(Path(path))
    except ConfigError as exc:
        raise OpenEnvInstallError(f"examples={path}: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not isinstance(line.get("responses_create_params"), dict) or not isinstance(line.get("response"), dict):
            raise OpenEnvInstallError(
                f"examples={path}:{number}: a line is a dataset row (responses_create_params) plus its recorded "
                "response (and reward)"
            )
    return lines


def _add_examples(manifest: Manifest, url: str, given: list[dict[str, Any]] | None, echo: Echo) -> None:
    """Fill the manifest's example rows and rollouts: the given ones, else one recorded here."""
    if given is not None:
        manifest.example_rollouts = given
        manifest.example_rows = [dataset_row(line) for line in given]
        manifest.examples_note = f"{len(given)} example rollouts given at install (-o examples=...)"
    else:
        try:
            asyncio.run(_record_example(manifest, url))
        except OpenEnvError as exc:
            manifest.examples_note = f"no example: the example episode failed: {exc.message}"
    echo(f"ngym: {manifest.examples_note}")


async def _record_example(manifest: Manifest, url: str) -> None:
    """One row from reset's observation and one action from the schema, stepped twice to see it repeats."""
    tool, schema, _ = examples.tool_name_and_schema(manifest)
    arguments = examples.example_action(schema)
    first = await _example_episode(manifest, url, tool, arguments)
    row = examples.example_row(manifest, first.observation)
    manifest.example_rows = [row]
    if first.problem is not None:
        manifest.examples_note = (
            f"no example rollout: {first.problem}; validate/profile/rollout need recorded rollouts: give them with "
            "-o examples=FILE.jsonl"
        )
        return
    second = await _example_episode(manifest, url, tool, arguments)
    repeats = second.problem is None and (second.observation, second.reward) == (first.observation, first.reward)
    reward = first.reward if repeats else None
    manifest.example_rollouts = [examples.recorded_rollout(row, tool, arguments, first.answer, reward)]
    if first.reward is None:
        why = f"no reward recorded: rule {manifest.reward_rule!r} found none"
    elif not repeats:
        why = "no reward recorded: a second episode did not repeat the first (does reset ignore the seed?)"
    else:
        why = f"reward {first.reward:g} under rule {manifest.reward_rule!r}, repeated by a second episode"
    manifest.examples_note = f"example rollout recorded: {tool}({json.dumps(arguments)}); {why}"


@dataclass
class _ExampleEpisode:
    observation: dict[str, Any]
    answer: dict[str, Any] = field(default_factory=dict)
    reward: float | None = None
    problem: str | None = None  #: why the example action could not be stepped


async def _example_episode(manifest: Manifest, url: str, tool: str, arguments: Any) -> _ExampleEpisode:
    """reset (seed 0) → the one call → the episode's reward under the environment's rule."""
    episode = await Episode.open(url)
    try:
        reset = await episode.reset(seed=examples.EXAMPLE_SEED)
        result = _ExampleEpisode(reset.get("observation") or {})
        if not isinstance(arguments, dict):
            result.problem = f"{tool}'s schema is not an object"
            return result
        action = {"type": "call_tool", "tool_name": tool, "arguments": arguments} if tool != "step" else arguments
        try:
            result.answer = await episode.step(action)
        except OpenEnvError as exc:
            result.problem = (
                f"the action made from {tool}'s schema, {json.dumps(arguments)}, was refused ({exc.message})"
            )
            return result
        reward = result.answer.get("reward")
        state = await episode.state() if manifest.reward_rule.startswith("state:") else None
        try:
            result.reward = episode_reward(
                manifest.reward_rule, [float(reward) if isinstance(reward, int | float) else None], state
            )
        except NoReward:
            result.reward = None
        return result
    finally:
        await episode.close()


# ---- asking the OpenEnv server -------------------------------------------------------------------------------


def _ask_launched(
    python: str, app: str, app_dir: str | None, echo: Echo, then: Callable[[str, dict[str, Any]], Manifest]
) -> Manifest:
    """Start the environment's OpenEnv server once, ask it (``_ask_server``), and ``then(url, facts)``."""
    echo(f"ngym: starting {app} once to read its schema and tools and record an example")
    try:
        running = launch.start(python, app, app_dir=app_dir, progress=echo)
    except launch.LaunchError as exc:
        raise OpenEnvInstallError(str(exc)) from None
    try:
        try:
            facts = _ask_server(running.url)
        except OpenEnvInstallError as exc:
            raise OpenEnvInstallError(f"{exc} ({running.where()})") from None
        return then(running.url, facts)
    finally:
        running.stop()


def _ask_server(url: str) -> dict[str, Any]:
    """``/schema`` and ``/metadata``, then one throwaway episode: ``reset`` and ``list_tools``."""
    http = url.replace("ws://", "http://").replace("wss://", "https://").rstrip("/").removesuffix("/ws")
    facts: dict[str, Any] = {}
    for route, key in (("/schema", "schema"), ("/metadata", "metadata")):
        try:
            answer = httpx.get(http + route, timeout=ASK_TIMEOUT)
        except httpx.TimeoutException:
            raise OpenEnvInstallError(
                f"the OpenEnv server at {http} did not answer {route} within {ASK_TIMEOUT:g} s (is it waiting for a "
                "service it needs, one it cannot reach from here?)"
            ) from None
        except httpx.HTTPError as exc:
            raise OpenEnvInstallError(f"cannot reach the OpenEnv server at {http}: {exc}") from None
        if answer.status_code == 200:
            facts[key] = answer.json()
    facts["tools"] = asyncio.run(_list_tools(url))
    return facts


async def _list_tools(url: str) -> list[dict[str, Any]] | None:
    """The MCP tools, or None for an environment that is not an MCP one (``list_tools`` is not its action)."""
    try:
        episode = await Episode.open(url)
    except OpenEnvError as exc:
        if re.search(r"HTTP (403|404)\b", exc.message):  # Starlette refuses a WebSocket to a route it lacks with 403
            raise OpenEnvInstallError(
                f"the app at {url} has no OpenEnv /ws route ({exc.message.rsplit(': ', 1)[-1]}): ngym drives "
                "OpenEnv servers over OpenEnv's /ws protocol, and this app serves only its own routes"
            ) from None
        raise OpenEnvInstallError(exc.message) from None
    try:
        try:
            await episode.reset()
        except OpenEnvError as exc:
            raise OpenEnvInstallError(
                f"the environment's reset failed at install ({exc.message}); give it what it needs (its environment "
                "variables, data) and install again"
            ) from None
        try:
            answer = await episode.step({"type": "list_tools"})
        except OpenEnvError:
            return None
        tools = (answer.get("observation") or {}).get("tools")
        if not isinstance(tools, list):
            return None
        return [
            {
                "name": t.get("name", ""),
                "description": t.get("description") or "",
                "input_schema": t.get("input_schema") or t.get("inputSchema") or {},
            }
            for t in tools
        ]
    finally:
        await episode.close()
