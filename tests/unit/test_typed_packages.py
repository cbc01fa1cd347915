"""Every plugin distribution ships its packages typed (PEP 561): a ``py.typed`` marker in each top-level package,
listed in its package data, so a plugin author's ``mypy --strict`` reads ngym's plugins' hints."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ngym.config import cache_root

REPO = Path(__file__).resolve().parents[2]
PLUGINS = sorted(path.parent for path in REPO.glob("plugins/*/pyproject.toml"))


def _top_level_packages(folder: Path) -> list[str]:
    return sorted(
        child.name for child in folder.iterdir() if (child / "__init__.py").is_file() and child.name != "tests"
    )


@pytest.mark.parametrize("folder", PLUGINS, ids=[folder.name for folder in PLUGINS])
def test_each_plugin_package_ships_a_py_typed_marker(folder: Path) -> None:
    setuptools = tomllib.loads((folder / "pyproject.toml").read_text()).get("tool", {}).get("setuptools", {})
    package_data = setuptools.get("package-data", {})
    packages = _top_level_packages(folder)
    assert packages
    for package in packages:
        assert (folder / package / "py.typed").is_file(), f"{folder.name}/{package} has no py.typed"
        assert "py.typed" in package_data.get(package, []), (
            f"{folder.name}'s package data does not ship {package}/py.typed"
        )


def test_a_scaffolded_environment_passes_mypy_strict(tmp_path: Path) -> None:
    """``ngym init``'s environment narrows ``seed_session`` / ``verify`` to its own body models and takes the
    ``Request`` in ``verify``, as the docs show; under ``mypy --strict`` that is not an incompatible override.

    Checked with the repository's mypy settings and a cache of its own per checkout (``make typecheck`` may run
    beside the suite on ``.mypy_cache``): ~10 s of CPU the first time, about a second after."""
    import hashlib
    import subprocess
    import sys

    from ngym.scaffold import scaffold

    path = scaffold("typed_tool", parent=tmp_path)
    cache = (cache_root() / "mypy-scaffold") / hashlib.sha256(str(REPO).encode()).hexdigest()[:16]
    command = [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--cache-dir", str(cache), str(path)]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
