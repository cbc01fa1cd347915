"""``ngym install verifiers:<folder | distribution | module.py>``: a verifiers environment as an ngym one.

Each environment gets an interpreter of its own: a virtualenv under ``$NGYM_CACHE_DIR/verifiers/venvs``
(default ``~/.cache/ngym/verifiers/venvs``) holding the environment and the verifiers version *it* pins.
ngym's own interpreter never imports verifiers: verifiers 0.4 requires ``mcp==2.0.0`` while ngym pins
``mcp<2``, and two environments may pin two verifiers versions. The venv is kept (reinstalling the same
environment only reinstalls its own project, seconds instead of minutes).

What the environment is (its API, tools with their JSON schemas, reward functions with their weights, a few
example rows) is asked of a worker started in that venv, and written with where the venv is to
``<ngym prefix>/share/ngym/verifiers/<name>.json``: ngym's registry reads those records (``ngym_verifiers.
plugin``), so ``ngym list`` shows the environment without starting anything.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ngym import Domain, NgymError
from ngym_verifiers import examples, records, venvs
from ngym_verifiers.catalog import KNOWN
from ngym_verifiers.process import WorkerError

SOURCE_PREFIX = "verifiers:"
Echo = Callable[[str], None]


class VerifiersInstallError(NgymError):
    """The environment could not be installed (the message says why and what to do)."""

    exit_code = 2


@dataclass(frozen=True)
class Source:
    """What to install: pip's requirement(s) and the module to serve."""

    kind: str  # "folder" | "distribution" | "module"
    requirements: list[str]
    name: str  # the environment's name (its module, dashes as underscores)
    module: str | None  # known now (a module file) or found after install (folder, distribution)
    distribution: str | None
    module_file: Path | None = None
    #: what pip brings from the package index, which keys the venv (a folder's path never does: the same project
    #: from a clone, a test's temporary copy or another worktree reuses one venv)
    index_requirements: tuple[str, ...] = ()
    #: installed beside the project: ``verifiers`` when a folder's project does not name it (verifiers' own
    #: example environments are members of its workspace and leave it out)
    added: tuple[str, ...] = ()
    #: a folder's dependencies when its pyproject.toml lists them (not dynamic): installed first, then the project
    #: alone, built once (pip would otherwise build it twice: to resolve, then to take its current code)
    dependencies: tuple[str, ...] = ()


def parse_source(text: str) -> Source:
    """Read ``verifiers:<...>``: a folder with a pyproject.toml, a ``.py`` module (its PEP 723 block names
    its requirements; default ``verifiers``), or a distribution on the package index (a pip requirement),
    optionally ``:MODULE``, the module that serves it (default: its top-level module)."""
    spec = text.removeprefix(SOURCE_PREFIX).strip()
    if not spec:
        raise VerifiersInstallError(
            "give what to install: verifiers:<folder>, verifiers:<module.py> or verifiers:<distribution>"
            " (ngym list --available verifiers)"
        )
    path = Path(spec).expanduser()
    if path.is_dir():
        pyproject = path / "pyproject.toml"
        if not pyproject.is_file():
            raise VerifiersInstallError(f"{path}: a verifiers environment folder has a pyproject.toml (none here)")
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        dist = str(project.get("name") or path.name)
        declared = project.get("dependencies")
        if not isinstance(declared, list) or "dependencies" in project.get("dynamic", []):
            declared = [f"{dist} (its folder's own dependencies)"]  # not known before pip builds it
        named = any(_requirement_name(str(d)) == "verifiers" for d in declared)
        added = () if named else ("verifiers",)
        static = "dependencies" in project and "dependencies" not in project.get("dynamic", [])
        return Source(
            "folder",
            [str(path.resolve())],
            _module_name(dist),
            None,
            dist,
            index_requirements=(*map(str, declared), *added),
            added=added,
            dependencies=(*map(str, declared), *added) if static else (),
        )
    if path.suffix == ".py":
        if not path.is_file():
            raise VerifiersInstallError(f"{path}: no such module file")
        requirements = inline_requirements(path.read_text(encoding="utf-8")) or ["verifiers"]
        return Source(
            "module",
            requirements,
            _module_name(path.stem),
            path.stem,
            None,
            path.resolve(),
            index_requirements=tuple(requirements),
        )
    if spec.startswith((".", "/", "~")):
        raise VerifiersInstallError(f"{spec}: no such folder or module file")
    # DISTRIBUTION:MODULE names the module that serves it, when it is not the distribution's own top-level
    # module (staros-stardata[env]:stardata.envs.constraint_gym); a URL requirement (name @ https://...) has none
    requirement, colon, module = spec.rpartition(":")
    if not colon or "@" in spec or not _MODULE_PATH.match(module):
        requirement, module = spec, ""
    match = re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    if not match:
        raise VerifiersInstallError(f"{spec!r} is not a distribution name, a folder or a .py module")
    distribution = match.group(0)
    known = KNOWN.get(distribution)
    pins: tuple[str, ...] = ()
    if known is not None and requirement == distribution and not module:
        # a bare name from `ngym list --available verifiers`: installed as that table says (its extra, the module
        # that serves it, the verifiers release its code was written for)
        requirement = f"{distribution}[{known.extra}]" if known.extra else distribution
        module = known.module
        pins = known.pins
    name = _module_name(module.rsplit(".", 1)[-1] if module else distribution)
    return Source(
        "distribution",
        [requirement, *pins],
        name,
        module or None,
        distribution,
        index_requirements=(requirement, *pins),
    )


_MODULE_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _module_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


#: PEP 723's own reference expression for an inline metadata block.
_SCRIPT_BLOCK = re.compile(r"(?m)^# /// script$\s(?P<body>(^#(| .*)$\s)+)^# ///$")


def inline_requirements(text: str) -> list[str]:
    """The ``dependencies`` of a module's PEP 723 ``# /// script`` block (empty when it has none)."""
    match = _SCRIPT_BLOCK.search(text)
    if not match:
        return []
    body = "\n".join(line[2:] if line.startswith("# ") else line[1:] for line in match.group("body").splitlines())
    return [str(d) for d in tomllib.loads(body).get("dependencies", [])]


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path, echo: Echo) -> Path:
    """Make the venv when missing (with ngym's interpreter's Python); its interpreter."""
    python = venv_python(venv)
    if not python.exists():
        echo(f"ngym: making the environment's own virtualenv {venv}")
        venv.parent.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "venv", "--clear", str(venv)], "making the virtualenv")
    return python


def pip_install(
    python: Path, requirements: list[str], *, verbose: bool, echo: Echo, dependencies: tuple[str, ...] = ()
) -> None:
    """pip ``requirements`` into the venv; a local project's current code is always taken. With its
    ``dependencies`` known, they are installed first and the project alone after them (one build of it)."""
    echo(f"ngym: installing {' '.join(requirements)} into it (the first time takes a few minutes)")
    args = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--upgrade-strategy", "only-if-needed"]
    folders = [r for r in requirements if Path(r).is_dir()]
    if dependencies and folders:
        _run([*args, *dependencies], "pip install (the dependencies)", verbose=verbose)
    else:
        _run([*args, *requirements], "pip install", verbose=verbose)
    if folders:  # a local project of the same version counts as installed: take its current code anyway
        _run([*args, "--force-reinstall", "--no-deps", *folders], "pip install (the project)", verbose=verbose)


def _run(command: list[str], what: str, *, verbose: bool = False) -> None:
    result = subprocess.run(command, capture_output=not verbose, text=True)
    if result.returncode:
        tail = (result.stdout or "") + (result.stderr or "")
        lines = [line for line in tail.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines[-8:]
        raise VerifiersInstallError(f"{what} failed (exit {result.returncode}): " + " | ".join(errors[-8:]))


def installed_modules(python: Path, distribution: str) -> list[str]:
    """The top-level modules a distribution installed in the venv (read from its RECORD there)."""
    script = (
        "import json, sys\nfrom importlib import metadata\n"
        "files = metadata.distribution(sys.argv[1]).files or []\n"
        "tops = set()\n"
        "for f in files:\n"
        "    parts = f.parts\n"
        "    if '.dist-info' in parts[0] or parts[0].startswith('..') or parts[0] == '__pycache__':\n"
        "        continue\n"
        "    if len(parts) == 1 and parts[0].endswith('.py'):\n"
        "        tops.add(parts[0][:-3])\n"
        "    elif len(parts) > 1 and parts[-1] == '__init__.py' and len(parts) == 2:\n"
        "        tops.add(parts[0])\n"
        "print(json.dumps(sorted(tops)))\n"
    )
    result = subprocess.run([str(python), "-c", script, distribution], capture_output=True, text=True)
    if result.returncode:
        raise VerifiersInstallError(
            f"{distribution} is not installed in {python.parent.parent}: {result.stderr[-300:]}"
        )
    return list(json.loads(result.stdout))


def choose_module(modules: list[str], distribution: str) -> str:
    wanted = _module_name(distribution)
    if wanted in modules:
        return wanted
    if len(modules) == 1:
        return modules[0]
    raise VerifiersInstallError(
        f"{distribution} installs {', '.join(modules) or 'no module'}: which one is the environment is unclear;"
        f" name it: verifiers:{distribution}:MODULE"
    )


def domain_of(declared: str | None, keywords: list[str]) -> Domain | None:
    """``--domain`` when given, else the first package keyword/tag that is an ngym domain."""
    if declared:
        return Domain.parse(declared)
    for word in keywords:
        try:
            return Domain.parse(word.strip().lower())
        except Exception:  # not a domain name: the next keyword may be
            continue
    return None


def package_keywords(python: Path, distribution: str | None, folder: Path | None) -> list[str]:
    """Keywords (or a verifiers pyproject's ``tags``) the environment's package declares."""
    if folder is not None:
        project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
        return [str(k) for k in [*project.get("keywords", []), *project.get("tags", [])]]
    if distribution is None:
        return []
    script = (
        "import json, sys\nfrom importlib import metadata\n"
        "m = metadata.metadata(sys.argv[1])\n"
        "print(json.dumps((m.get('Keywords') or '').replace(',', ' ').split()))\n"
    )
    result = subprocess.run([str(python), "-c", script, distribution], capture_output=True, text=True)
    return list(json.loads(result.stdout)) if result.returncode == 0 else []


def _no_domain(name: str, keywords: list[str]) -> VerifiersInstallError:
    return VerifiersInstallError(
        f"{name}: its package declares no domain (keywords: {', '.join(keywords) or 'none'}); say which with"
        f" --domain ({', '.join(d.value for d in Domain)})"
    )


def _check_domain_before_work(source: Source, name: str, domain: str | None) -> None:
    """A module names no domain, and a folder's pyproject says whether it does: ask for ``--domain`` before any
    venv or pip work (minutes), not after. A distribution's keywords are read once it is installed."""
    if source.kind == "module" and domain is None:
        raise _no_domain(name, [])
    if source.kind == "folder":
        keywords = package_keywords(Path(), None, Path(source.requirements[0]))
        if domain_of(domain, keywords) is None:
            raise _no_domain(name, keywords)


def _option_value(text: str) -> Any:
    """``-o KEY=VALUE``'s value: JSON when it parses (numbers, booleans, lists), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def install_source(
    text: str,
    *,
    as_name: str | None = None,
    domain: str | None = None,
    options: dict[str, str] | None = None,
    verbose: bool = False,
    echo: Echo = print,
    args: dict[str, Any] | None = None,
) -> records.Record:
    """Install one verifiers environment and record it for ngym's registry; the record.

    ``options`` (``ngym install -o KEY=VALUE``) are arguments of the environment's ``load_environment`` (or its
    taskset's config): each value is read as JSON when it parses (``-o max_turns=3``), else kept as text.
    """
    options = dict(options or {})
    dataset_files = {
        k.removeprefix(DATASET_OPTION): options.pop(k) for k in list(options) if k.startswith(DATASET_OPTION)
    }
    args = {**(args or {}), **{key: _option_value(value) for key, value in options.items()}} or None
    source = parse_source(text)
    name = as_name or source.name
    if not records.NAME.match(name):
        raise VerifiersInstallError(f"{name!r} is not a usable environment name (letters, digits, _; --as NAME)")
    _check_domain_before_work(source, name, domain)
    datasets = keep_datasets(name, dataset_files)
    venv = venvs.venv_for(source.index_requirements)
    # held from pip to the recorded fingerprint: another install into this venv (the same requirements) waits
    with venvs.installing(venv, echo):
        record, made = _install_into(venv, source, text, name, domain, args, datasets, verbose=verbose, echo=echo)
    folder = examples.write(name, made)
    records.write(record)
    in_use = {Path(r.python).parent.parent for r in records.all_records()}
    venvs.prune(in_use | {venv}, echo)
    for problem in made.problems:
        echo(f"ngym: warning: no example rollout for {problem}")
    tools = ", ".join(t["name"] for t in record.tools) or "no tools"
    rewards = ", ".join(f"{r['name']}×{r['weight']:g}" for r in record.rewards) or "no rewards"
    echo(f"ngym: installed {name} ({record.domain}; verifiers {record.api} API; tools: {tools}; rewards: {rewards})")
    echo(
        f"ngym: example data: {len(made.rows)} rows, {len(made.rollouts)} recorded rollouts (the reference answers'"
        f" rewards) in {folder / 'data'}"
    )
    echo(f"      try: ngym run {name} | ngym validate {name} | ngym profile {name} --duration 10s")
    return record


def _install_into(
    venv: Path,
    source: Source,
    text: str,
    name: str,
    domain: str | None,
    args: dict[str, Any] | None,
    datasets: dict[str, str],
    *,
    verbose: bool,
    echo: Echo,
) -> tuple[records.Record, examples.Examples]:
    """pip, the module, the domain and the worker's description of the environment: its record and examples."""
    python = ensure_venv(venv, echo)
    if source.added:
        echo(f"ngym: {source.distribution} does not name verifiers among its dependencies: adding it")
    pip_install(
        python, [*source.requirements, *source.added], verbose=verbose, echo=echo, dependencies=source.dependencies
    )
    if source.kind == "module":
        assert source.module_file is not None
        copy_module(python, source.module_file)
    module = source.module
    if source.module is None and source.distribution is not None:
        module = choose_module(installed_modules(python, source.distribution), source.distribution)
    assert module is not None
    folder = Path(source.requirements[0]) if source.kind == "folder" else None
    keywords = package_keywords(python, source.distribution, folder)
    resolved = domain_of(domain, keywords)
    if resolved is None and source.distribution in KNOWN:  # ngym list --available's table knows it
        resolved = Domain.parse(KNOWN[source.distribution].domain)
    if resolved is None:
        raise _no_domain(name, keywords)
    echo(f"ngym: asking {module} what it serves, and scoring its tasks' reference answers as example rollouts")
    try:
        described, made = asyncio.run(examples.describe_and_record(str(python), module, args, datasets))
    except WorkerError as exc:
        reason = "refused" if exc.kind == "refused" else "failed to load"
        detail = f"\n{exc.trace}" if exc.trace and verbose else ""
        hint = legacy_api_hint(str(exc), installed_version(python, "verifiers"), source)
        raise VerifiersInstallError(f"{name}: {reason}: {exc}{hint}{detail}") from exc
    record = records.Record(
        name=name,
        module=module,
        python=str(python),
        source=text,
        distribution=source.distribution,
        domain=resolved.value,
        api=str(described["api"]),
        args=args or {},
        tools=list(described.get("tools", [])),
        rewards=list(described.get("rewards", [])),
        examples=list(described.get("examples", [])),
        description=_description(described, module),
        datasets=datasets,
        fingerprint=venvs.fingerprint(
            python, distribution=source.distribution, module=module if source.kind == "module" else None
        ),
    )
    return record, made


#: ``-o dataset:NAME=FILE.jsonl``: the environment's ``datasets.load_dataset(NAME, ...)`` reads FILE instead of the
#: Hugging Face Hub (this key cannot be an argument of ``load_environment``: it is no Python name)
DATASET_OPTION = "dataset:"


def keep_datasets(name: str, files: dict[str, str]) -> dict[str, str]:
    """Copy each ``-o dataset:NAME=FILE`` file beside the environment's record (the server reads it at each
    start, so it must outlive the user's copy); {dataset name: kept file}."""
    kept: dict[str, str] = {}
    for dataset, given in files.items():
        path = Path(given).expanduser()
        if not dataset or not path.is_file():
            raise VerifiersInstallError(
                f"-o {DATASET_OPTION}{dataset}={given}: expected {DATASET_OPTION}NAME=FILE.jsonl with an existing"
                " file (JSON lines, one row of the dataset each)"
            )
        target = records.folder_of(name) / "datasets" / (re.sub(r"[^A-Za-z0-9_.-]", "_", dataset) + ".jsonl")
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.resolve() != target.resolve():
            target.write_bytes(path.read_bytes())
        kept[dataset] = str(target)
    return kept


def installed_version(python: Path, distribution: str) -> str | None:
    """The version of ``distribution`` in the venv of ``python`` (None when it is not there)."""
    script = "import sys\nfrom importlib import metadata\nprint(metadata.version(sys.argv[1]))\n"
    result = subprocess.run([str(python), "-c", script, distribution], capture_output=True, text=True)
    return result.stdout.strip() or None if result.returncode == 0 else None


def legacy_api_hint(error: str, verifiers_version: str | None, source: Source) -> str:
    """What to do when <= 0.3 code met verifiers 0.4, which removed that API (``vf.Rubric``, ``vf.SingleTurnEnv``
    ...): the package does not pin verifiers below 0.4, so pip took the newest. Empty when that is not the case."""
    major_minor = tuple(int(part) for part in (verifiers_version or "0.0").split(".")[:2] if part.isdigit())
    if major_minor < (0, 4) or "module 'verifiers' has no attribute" not in error:
        return ""
    wanted = source.requirements[0] if source.kind == "distribution" else "<its requirement>"
    return (
        f" (it is written for the verifiers <= 0.3 API, which verifiers {verifiers_version}, the newest its"
        " requirements allow, removed; serve it with the release it was written for: a module such as"
        f' `# /// script` / `# dependencies = [{json.dumps(wanted)}, "verifiers==0.3.1"]` / `# ///` +'
        f" `from {source.module or source.name} import load_environment`, installed as verifiers:<that file.py>)"
    )


def _description(described: dict[str, Any], module: str) -> str:
    kind = described.get("kind") or ("Taskset" if described.get("api") == "v1" else "Environment")
    return f"verifiers {kind} {module} ({described.get('num_tasks', 0)} tasks)"


def copy_module(python: Path, module_file: Path) -> None:
    """Put a single-module environment into the venv's site-packages (a copy: the venv is self-contained)."""
    result = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    target = Path(result.stdout.strip()) / module_file.name
    target.write_bytes(module_file.read_bytes())


def uninstall(name: str, *, echo: Echo = print) -> bool:
    """Remove installed environment ``name`` (its record and its venv); False when it is not one of ours."""
    try:
        record = records.read(name)
    except KeyError:
        return False
    records.remove(name)
    examples.remove(name)
    venv = Path(record.python).parent.parent
    shared = any(other.python == record.python for other in records.all_records())
    if shared:
        kept = " kept: other environments use it"
    elif venv.parent != venvs.venvs_dir():
        kept = " kept: not in ngym's cache"
    elif venvs.remove_unless_in_use(venv):
        kept = " removed"
    else:  # a server of it (or of an environment installed elsewhere with the same requirements) is running
        kept = " kept: in use (a running server or an install holds it; pruned once idle)"
    echo(f"ngym: uninstalled {name} (verifiers environment; its virtualenv {venv}{kept})")
    return True
