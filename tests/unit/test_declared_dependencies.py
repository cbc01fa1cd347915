"""Every third-party module ngym imports is declared in its pyproject.toml.

A dependency that only arrives transitively (``packaging`` through pip's neighbours in a dev venv) works in the
test venv and breaks a user's fresh ``pip install ngym``: ``ngym install nemo-gym:NAME`` once failed there with
``No module named 'packaging'``.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


#: Modules an adapter runs in the environment's own virtualenv (``python probe.py``): what they import is that
#: venv's business (OpenEnv, verifiers), never a dependency of the plugin's distribution.
OTHER_INTERPRETER = {
    (REPO / "plugins/ngym_openenv/ngym_openenv/probe.py").as_posix(),
    (REPO / "plugins/ngym_openenv/ngym_openenv/own_client.py").as_posix(),
    (REPO / "plugins/ngym_verifiers/ngym_verifiers/worker.py").as_posix(),
    (REPO / "plugins/ngym_verifiers/ngym_verifiers/worker_base.py").as_posix(),
    (REPO / "plugins/ngym_verifiers/ngym_verifiers/worker_legacy.py").as_posix(),
    (REPO / "plugins/ngym_verifiers/ngym_verifiers/vf_runtime.py").as_posix(),
}


def imported_top_level_modules(package: Path) -> dict[str, Path]:
    """Top-level module name -> first file importing it, for absolute imports in ``package`` outside its tests
    (what tests import is the dev extra's business)."""
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        if "tests" in path.relative_to(package).parts or path.as_posix() in OTHER_INTERPRETER:
            continue
        tree = ast.parse(path.read_text(), str(path))
        optional = {id(node) for node in ast.walk(tree) for node in _optional_imports(node)}
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.partition(".")[0], path)
    return found


def _optional_imports(node: ast.AST) -> list[ast.AST]:
    """The imports inside a ``try`` whose ``except`` catches ImportError: optional by design."""
    if not isinstance(node, ast.Try):
        return []
    caught = {n.id for h in node.handlers if h.type is not None for n in ast.walk(h.type) if isinstance(n, ast.Name)}
    if not caught & {"ImportError", "ModuleNotFoundError"}:
        return []
    return [n for statement in node.body for n in ast.walk(statement) if isinstance(n, ast.Import | ast.ImportFrom)]


def declared_distributions(pyproject: Path) -> set[str]:
    """Canonical names of the required and optional dependencies, extras of ngym itself followed."""
    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    return {canonicalize_name(Requirement(spec).name) for spec in specs}


# (project folder, the packages it ships): ngym and the distributions beside it in this repository.
PROJECTS = [
    (REPO, ["ngym"]),
    (REPO / "plugins" / "ngym_nemo_gym", ["nemo_gym", "ngym_nemo_gym"]),
    (REPO / "plugins" / "ngym_redis", ["ngym_redis"]),
    (REPO / "plugins" / "ngym_openenv", ["ngym_openenv"]),
    (REPO / "plugins" / "ngym_verifiers", ["ngym_verifiers"]),
    *((folder, [folder.name]) for folder in sorted((REPO / "resources_servers").iterdir()) if folder.is_dir()),
]


@pytest.mark.parametrize(("project", "packages"), PROJECTS, ids=lambda p: p.name if isinstance(p, Path) else "")
def test_every_third_party_import_is_declared(project: Path, packages: list[str]) -> None:
    declared = declared_distributions(project / "pyproject.toml")
    if "ngym" in declared:
        # A plugin builds on ngym's public surface (FastAPI apps, pydantic models): ngym's own dependencies are
        # part of what it gets.
        declared |= declared_distributions(REPO / "pyproject.toml")
    providers = metadata.packages_distributions()
    undeclared = []
    imported: dict[str, Path] = {}
    for package in packages:
        # an environment's folder is its package (flat layout); plugins keep theirs in a subfolder
        source = project / package if (project / package).is_dir() else project
        for module, path in imported_top_level_modules(source).items():
            imported.setdefault(module, path)
    for module, path in imported.items():
        if module in sys.stdlib_module_names or module in packages or module == "ngym":
            continue
        # a module of an optional extra that is not installed here (ray) has no provider to ask: its
        # distribution is then the one of its own name
        distributions = {canonicalize_name(d) for d in providers.get(module, [canonicalize_name(module)])}
        if not distributions & declared:
            undeclared.append(f"{module} (imported by {path.relative_to(REPO)}; provided by {sorted(distributions)})")
    assert not undeclared, "imported but not declared in pyproject.toml: " + "; ".join(undeclared)


def test_the_check_sees_an_undeclared_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text(
        "import json\nfrom packaging.version import Version\ntry:\n    import uv\nexcept ImportError:\n    uv = None\n"
    )
    assert set(imported_top_level_modules(package)) == {"json", "packaging"}  # uv is optional there
