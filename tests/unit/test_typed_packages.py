"""Every plugin distribution ships its packages typed (PEP 561): a ``py.typed`` marker in each top-level package,
listed in its package data, so a plugin author's ``mypy --strict`` reads ngym's plugins' hints."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = sorted(path.parent for path in REPO.glob("plugins/*/pyproject.toml"))


def _top_level_packages(folder: Path) -> list[str]:
    return sorted(
        child.name for child in folder.iterdir() if (child / "__init__.py").is_file() and child.name != "tests"
    )


@pytest.mark.parametrize("folder", PLUGINS, ids=[folder.name for folder in PLUGINS])
def test_each_plugin_package_ships_a_py_typed_marker(folder: Path) -> None:
    package_data = tomllib.loads((folder / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    packages = _top_level_packages(folder)
    assert packages
    for package in packages:
        assert (folder / package / "py.typed").is_file(), f"{folder.name}/{package} has no py.typed"
        assert "py.typed" in package_data.get(package, []), (
            f"{folder.name}'s package data does not ship {package}/py.typed"
        )
