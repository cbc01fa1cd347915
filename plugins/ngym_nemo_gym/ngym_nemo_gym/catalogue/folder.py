"""What a NeMo Gym environment folder declares: its name, server class, domain, requirements and siblings.

A NeMo Gym environment is ``resources_servers/<name>/`` holding ``app.py`` (run as a script: its
``if __name__ == "__main__": Server.run_webserver()`` names the server class), ``configs/*.yaml`` (the
resources-server instance gives ``entrypoint`` and ``domain``), ``requirements.txt`` or a
``pyproject.toml`` (listing ``nemo-gym`` itself, which ngym replaces with ``ngym-nemo-gym``), ``data/`` and
``tests/``. Everything here is read statically: nothing of the environment is imported.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from ngym import NgymError
from ngym_nemo_gym.catalogue.runtime_deps import not_declared, runtime_requirements
from ngym_nemo_gym.catalogue.wheel import companion_closure, resources_server_fields

#: The module the generated entry point names. NeMo Gym runs an entrypoint as a script with its folder on
#: ``PYTHONPATH``, so environments import their own modules as top-level ones (``from utils import ...``); this
#: generated module (``ngym_nemo_gym.catalogue.package.SHIM_TEXT``) puts the folder first on ``sys.path``, then
#: imports the server.
ENTRY_SHIM = "_ngym_entry"
#: The compat distribution every installed NeMo Gym environment requires instead of ``nemo-gym``.
COMPAT_DISTRIBUTION = "ngym-nemo-gym"
#: ``nemo-gym[dev]`` is how NeMo environments ask for their test tools; these are the ones tests use.
DEV_REQUIREMENTS = ("pytest>=8", "pytest-asyncio>=0.23", "requests-mock>=1.11", "defusedxml>=0.7.1")
#: ``nemo-gym[sandbox]`` brings NeMo's remote sandbox SDKs; here the sandboxes ngym runs are Docker's (the
#: ``docker`` provider and ``AsyncSandboxCompose`` drive the engine through the Docker SDK).
SANDBOX_REQUIREMENTS = (f"{COMPAT_DISTRIBUTION}[docker]",)
_SIBLING = re.compile(r"resources_servers[./]([A-Za-z_][A-Za-z0-9_]*)")
_SELF_REFERENCE = re.compile(r"^\s*(-e\s+)?nemo[-_]gym\b", re.IGNORECASE)


class NemoEnvironmentError(NgymError):
    """A folder is not a NeMo Gym environment, or declares something ngym cannot install."""

    exit_code = 2


@dataclass
class NemoEnvironment:
    """A NeMo Gym environment folder, read statically."""

    folder: Path
    name: str
    config: Path | None
    domain: str | None
    description: str
    entry_module: str | None  # e.g. "app" (the entrypoint file, without .py)
    server_class: str | None  # None: a library other environments import (e.g. gymnasium's base class)
    requirements: list[str] = field(default_factory=list)  # PEP 508, self-reference replaced
    pip_lines: list[str] = field(default_factory=list)  # requirement lines that are not PEP 508 (pip options)
    siblings: list[str] = field(default_factory=list)  # other environments it imports
    companions: list[str] = field(default_factory=list)  # "benchmarks/<x>" folders it reads from NeMo's root
    #: the NeMo-runtime libraries its code imports, declared or not (all a sibling installed as code only gets)
    runtime_requirements: list[str] = field(default_factory=list)

    @property
    def target(self) -> str | None:
        """The ``module:Class`` of the server once installed as ``resources_servers.<name>``."""
        if self.server_class is None or self.entry_module is None:
            return None
        return f"resources_servers.{self.name}.{self.entry_module}:{self.server_class}"

    @property
    def entry_point(self) -> str | None:
        """What the generated entry point names: the shim module that first makes the folder importable
        (``ENTRY_SHIM``), then the server class."""
        if self.server_class is None:
            return None
        return f"resources_servers.{self.name}.{ENTRY_SHIM}:{self.server_class}"

    @property
    def distribution(self) -> str:
        return distribution_name(self.name)


def distribution_name(env_name: str) -> str:
    """The pip distribution an installed NeMo Gym environment becomes: ``ngym-nemo-<name>``."""
    return "ngym-nemo-" + env_name.replace("_", "-").lower()


def read_environment(folder: Path, known_siblings: set[str] | None = None) -> NemoEnvironment:
    """Read ``folder``; ``known_siblings`` are the environment names a sibling import may refer to."""
    folder = folder.resolve()
    if not folder.is_dir():
        raise NemoEnvironmentError(f"{folder}: not a folder")
    name = folder.name
    if not name.isidentifier():
        raise NemoEnvironmentError(f"{folder}: a NeMo Gym environment folder is named like a module ({name!r} is not)")
    config, fields = _resources_server_config(folder)
    if config is None and not (folder / "app.py").is_file():
        raise NemoEnvironmentError(
            f"{folder}: not a NeMo Gym environment (no app.py and no configs/*.yaml with a resources_servers instance)"
        )
    entry_file = str((fields or {}).get("entrypoint") or "app.py")
    entry_path = folder / entry_file
    entry_module = entry_path.stem if entry_path.suffix == ".py" and entry_path.is_file() else None
    server_class = _server_class(entry_path) if entry_module else None
    requirements, pip_lines = _requirements(folder)
    companions = _companions(folder)
    companion_folders = [folder.parent.parent / ref for ref in companions]
    runtime = runtime_requirements([folder, *companion_folders])
    requirements += not_declared(runtime, [*requirements, *pip_lines])
    return NemoEnvironment(
        folder=folder,
        name=name,
        config=config,
        domain=(fields or {}).get("domain"),
        description=str((fields or {}).get("description") or ""),
        entry_module=entry_module,
        server_class=server_class,
        requirements=requirements,
        pip_lines=pip_lines,
        siblings=_siblings(folder, known_siblings),
        companions=companions,
        runtime_requirements=runtime,
    )


def _companions(folder: Path) -> list[str]:
    """The ``benchmarks/<x>`` folders it references that sit beside its ``resources_servers/`` (NeMo's root)."""
    if folder.parent.name != "resources_servers":
        return []
    return companion_closure(folder, folder.parent.parent)


def _resources_server_config(folder: Path) -> tuple[Path | None, dict[str, Any] | None]:
    """The config that defines the resources-server instance: ``configs/<name>.yaml`` first, else the first."""
    configs = sorted((folder / "configs").glob("*.yaml"), key=lambda p: (p.stem != folder.name, p.name))
    for path in configs:
        fields = resources_server_fields(path.read_text(encoding="utf-8", errors="replace"))
        if fields is not None:
            return path, fields
    return None, None


def _server_class(entry_path: Path) -> str | None:
    """The class whose ``run_webserver()`` the entrypoint's ``__main__`` block calls (how NeMo starts it)."""
    try:
        tree = ast.parse(entry_path.read_text(encoding="utf-8"), filename=str(entry_path))
    except SyntaxError as exc:
        raise NemoEnvironmentError(f"{entry_path}: cannot parse: {exc}") from None
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_guard(node.test):
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Call)
                    and isinstance(sub.func, ast.Attribute)
                    and sub.func.attr == "run_webserver"
                    and isinstance(sub.func.value, ast.Name)
                ):
                    return sub.func.value.id
    return None


def _is_main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _requirements(folder: Path) -> tuple[list[str], list[str]]:
    """(PEP 508 requirements, other pip lines) with ``nemo-gym`` replaced by the compat distribution."""
    lines: list[str] = []
    if (folder / "requirements.txt").is_file():
        lines = (folder / "requirements.txt").read_text(encoding="utf-8").splitlines()
    elif (folder / "pyproject.toml").is_file():
        project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
        lines = list(project.get("dependencies", []))
    requirements: list[str] = [COMPAT_DISTRIBUTION]
    pip_lines: list[str] = []
    for raw in lines:
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if _SELF_REFERENCE.match(line) or "../.." in line:  # NeMo's own rule for its self-reference
            extras = _extras(line)
            if "dev" in extras:
                requirements.extend(DEV_REQUIREMENTS)
            if "sandbox" in extras:
                requirements.extend(SANDBOX_REQUIREMENTS)
            continue
        try:
            requirements.append(str(Requirement(line)))
        except InvalidRequirement:
            pip_lines.append(_absolute_local_path(line, folder))
    return list(dict.fromkeys(requirements)), pip_lines


def _absolute_local_path(line: str, folder: Path) -> str:
    """``-e ./sub[extra]`` (relative to the environment) becomes an absolute, non-editable path."""
    match = re.match(r"^(-e\s+)?(\.{1,2}/\S*)$", line)
    if match is None:
        return line
    path, _, extras = match.group(2).partition("[")
    return str((folder / path).resolve()) + (f"[{extras}" if extras else "")


def _extras(line: str) -> set[str]:
    match = re.search(r"\[([^\]]*)\]", line)
    return {e.strip() for e in match.group(1).split(",")} if match else set()


def _siblings(folder: Path, known: set[str] | None) -> list[str]:
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        if "__pycache__" in path.parts or ".venv" in path.parts:
            continue
        found.update(_code_references(path.read_text(encoding="utf-8", errors="replace")))
    found.discard(folder.name)
    if known is not None:
        found &= known
    return sorted(found)


def _code_references(source: str) -> set[str]:
    """The environments a module's code names: ``resources_servers.<x>`` imports, and ``resources_servers/<x>``
    or ``resources_servers.<x>`` in string literals (paths read at run time, dynamic imports).

    Comments and docstrings are prose: "see resources_servers/finance_agent_v2/tests/..." must not make the
    other environment (and its requirements, a git URL there) part of the install. A file that does not parse
    is read as text."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set(_SIBLING.findall(source))
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            names = [node.value]
        else:
            continue
        for name in names:
            found.update(_SIBLING.findall(name))
    return found
