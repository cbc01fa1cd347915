"""The pip project ngym generates to install a NeMo Gym environment as an ngym plugin (pure functions).

Layout of the generated project (built in a temporary folder, installed with pip, then discarded)::

    pyproject.toml                 name ngym-nemo-<name>, the environment's requirements with nemo-gym
                                   replaced by ngym-nemo-gym, an ngym.resources_servers entry point
    resources_servers/<name>/...   the environment folder, every file (app.py, configs/, data/, tests/)
    benchmarks/<x>/...             the companion folders its files name, when NeMo Gym ships them (judge
                                   configs, prompts: read relative to NeMo Gym's root)

Why this shape: NeMo Gym environments import themselves and each other as ``resources_servers.<name>``
(tests do ``from resources_servers.<name>.app import ...``, some servers subclass a sibling's), resolve
data paths next to their own files, and are tested from inside their folder. Installing the folder as
``resources_servers.<name>`` (an implicit namespace package, so many environments share the top level, as
in NeMo Gym's own wheel) keeps every one of those imports and paths working unchanged, while the entry point
makes it an ordinary ngym plugin: ``ngym list`` finds it without importing it, ``ngym uninstall`` removes it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ngym.nemo.folder import NemoEnvironment, distribution_name

#: Folders never shipped: local virtualenvs and build debris next to an environment checked out of git.
SKIPPED = shutil.ignore_patterns(".venv", "__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", "build", "dist")


def render_pyproject(env: NemoEnvironment, *, ngym_name: str | None = None, version: str = "0.7.0") -> str:
    """The ``pyproject.toml`` text; ``ngym_name`` registers the server under another name (``--as``)."""
    dependencies = [*env.requirements, *(distribution_name(s) for s in env.siblings)]
    description = f"NeMo Gym environment {env.name!r} packaged as an ngym plugin"
    lines = [
        "[build-system]",
        'requires = ["setuptools>=68"]',
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f"name = {json.dumps(env.distribution)}",
        f"version = {json.dumps(version)}",
        f"description = {json.dumps(description)}",
        f"dependencies = {json.dumps(dependencies)}",
        "",
    ]
    if env.target is not None:
        lines += [
            '[project.entry-points."ngym.resources_servers"]',
            f"{ngym_name or env.name} = {json.dumps(env.target)}",
            "",
        ]
    packages = [f"resources_servers.{env.name}", *(ref.replace("/", ".") for ref in env.companions)]
    lines += ["[tool.setuptools]", f"packages = {json.dumps(packages)}", "include-package-data = false", ""]
    # every file of each folder, recursively: data, configs, tests and nested modules alike
    lines += ["[tool.setuptools.package-data]", *(f'"{p}" = ["**/*", "**/.*"]' for p in packages), ""]
    return "\n".join(lines)


def build_project(env: NemoEnvironment, dest: Path, *, ngym_name: str | None = None, version: str = "0.7.0") -> Path:
    """Write the generated project for ``env`` into ``dest`` (created); the project folder."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(env.folder, dest / "resources_servers" / env.name, ignore=SKIPPED, dirs_exist_ok=True)
    for ref in env.companions:  # benchmarks/<x>/, read relative to the folder holding resources_servers/
        shutil.copytree(env.folder.parent.parent / ref, dest / ref, ignore=SKIPPED, dirs_exist_ok=True)
    (dest / "pyproject.toml").write_text(render_pyproject(env, ngym_name=ngym_name, version=version))
    return dest
