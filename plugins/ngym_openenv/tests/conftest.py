"""Fixtures of the OpenEnv plugin's tests: OpenEnv itself, from the package index, in cached virtualenvs.

OpenEnv needs ``fastmcp>=3`` and ``gradio``, and its environments pin their own ``openenv``/``openenv-core``: they
live in virtualenvs of their own under ``~/.cache/ngym`` (``$NGYM_OPENENV_TEST_VENVS`` overrides the folder),
made once (a few minutes on a new machine) and reused while they import. They are never skipped: where the package
index cannot be reached, making them fails the test with pip's reason.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

from ngym.config import cache_root

#: The OpenEnv releases the fidelity tests are pinned to (the newest on the index when written).
OPENENV = "openenv==0.10.0"  # the framework's distribution since 0.4 (was openenv-core); `openenv init` is its CLI
DIPG = "openenv-dipg-safety==0.1.67"  # requires openenv-core>=0.2.0, which resolves to openenv-core 0.3.0
DRIVER = Path(__file__).with_name("openenv_driver.py")


def _venv_folder() -> Path:
    return Path(os.environ.get("NGYM_OPENENV_TEST_VENVS") or cache_root())


def cached_venv(name: str, requirements: list[str], check: str) -> str:
    """The python of ``<cache>/<name>`` holding ``requirements``, made when ``python -c check`` fails there."""
    where = _venv_folder() / name
    where.parent.mkdir(parents=True, exist_ok=True)
    with open(where.parent / f"{name}.lock", "a") as lock:  # two suites at once: one makes it, the other waits
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _made_venv(where, requirements, check)


def _made_venv(where: Path, requirements: list[str], check: str) -> str:
    python = where / "bin" / "python"
    ready = where / ".ngym-ready"
    if ready.is_file() and subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0:
        return str(python)
    sys.stderr.write(f"openenv tests: making {where} with {' '.join(requirements)} (once; a few minutes)\n")
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"pip install {requirements} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    ready.write_text(json.dumps(requirements) + "\n")
    return str(python)


@pytest.fixture(scope="session")
def openenv_python() -> str:
    """An interpreter with OpenEnv 0.10.0 (its `openenv` CLI beside it)."""
    return cached_venv("openenv-0.10.0-py311", [OPENENV], "import openenv.core, uvicorn")


@pytest.fixture(scope="session")
def dipg_python() -> str:
    """An interpreter with openenv-dipg-safety 0.1.67 and what it requires."""
    return cached_venv("openenv-dipg-safety-0.1.67-py311", [DIPG], "import med_safety_gym.app, uvicorn")


@pytest.fixture
def driver() -> Any:
    """``driver(python, request)``: OpenEnv's side of a comparison (see openenv_driver.py)."""
    return _drive


def _drive(python: str, request: dict[str, Any]) -> dict[str, Any]:
    """Run ``openenv_driver.py`` in ``python`` (OpenEnv's side); its JSON answer."""
    result = subprocess.run([python, str(DRIVER), json.dumps(request)], capture_output=True, text=True, timeout=300)
    line = next((x for x in reversed(result.stdout.splitlines()) if x.startswith("DRIVER ")), None)
    assert result.returncode == 0 and line, f"driver failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    answer: dict[str, Any] = json.loads(line.removeprefix("DRIVER "))
    return answer
