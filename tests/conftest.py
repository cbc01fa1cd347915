"""Shared fixtures: in-process apps of the built-in examples and a scratch environment."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ngym.config import cache_root
from ngym.testing import app_for, serve_in_process


@pytest.fixture
def lenient_registry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fresh plugin registry, not strict, with its caches in a scratch folder (use with ``usefixtures``)."""
    from ngym.plugins.manager import STRICT_ENV
    from ngym.plugins.registry import reset_registry

    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.setenv("NGYM_CACHE_DIR", str(tmp_path / "cache"))
    reset_registry()


@pytest.fixture
async def counter_http() -> AsyncIterator[httpx.AsyncClient]:
    async with serve_in_process(app_for("example_session_state_mgmt")) as http:
        yield http


@pytest.fixture
async def weather_http() -> AsyncIterator[httpx.AsyncClient]:
    async with serve_in_process(app_for("example_single_tool_call")) as http:
        yield http


NEMO_VENV_SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "nemo_venv.sh"


@pytest.fixture(scope="session")
def nemo_python() -> Path:
    """The python of the NeMo Gym 0.7.0 venv (``tools/nemo_venv.sh``), for tests that compare against NeMo itself.

    Outside CI a missing venv skips the test (making it takes ~80 s and PyPI); under CI=true it is made, and a
    failure to make it fails the test: conformance is never skipped there.
    """
    in_ci = os.environ.get("CI", "").lower() == "true"
    venv = Path(os.environ.get("NGYM_NEMO_VENV") or (cache_root() / "nemo-gym-0.7.0-py313"))
    python = venv / "bin" / "python"
    if not in_ci and not (python.is_file() and _imports_nemo(python)):
        pytest.skip(f"no NeMo Gym 0.7.0 venv at {venv} (make it with tools/nemo_venv.sh or set NGYM_NEMO_VENV)")
    made = subprocess.run(["bash", str(NEMO_VENV_SCRIPT)], capture_output=True, text=True, timeout=900)
    if made.returncode != 0:
        pytest.fail(f"tools/nemo_venv.sh failed: {made.stderr.strip()[-2000:]}")
    return Path(made.stdout.strip().splitlines()[-1]) / "bin" / "python"


TRAINER_VENV_SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "trainer_venv.sh"


@pytest.fixture(scope="session")
def trainer_python() -> Path:
    """The python of the one trainer venv (``tools/trainer_venv.sh``: TRL, verl, skyrl-gym and the openreward SDK),
    for the tests that drive ngym with a trainer's or an SDK's own code (``make trainers``, ``trainers-verl``, ``ors``).

    Outside CI a venv not yet made skips the test (it takes ~8 min and ~6 GB); under CI=true it is made, and a
    failure to make it fails the test.
    """
    in_ci = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
    if not in_ci:
        ready = subprocess.run(["bash", str(TRAINER_VENV_SCRIPT), "--check"], capture_output=True, timeout=120)
        if ready.returncode != 0:
            pytest.skip("no trainer venv yet (make it with tools/trainer_venv.sh, ~8 min)")
    made = subprocess.run(["bash", str(TRAINER_VENV_SCRIPT)], capture_output=True, text=True, timeout=3600)
    if made.returncode != 0:
        pytest.fail(f"tools/trainer_venv.sh failed: {made.stderr.strip()[-2000:]}")
    return Path(made.stdout.strip().splitlines()[-1]) / "bin" / "python"


def _imports_nemo(python: Path) -> bool:
    return subprocess.run([str(python), "-c", "import nemo_gym"], capture_output=True).returncode == 0


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI=true a skipped test is a failure: `.ci/run` installs what every test needs, so a skip there means
    a test silently did not run (outside CI, `make test -rs` lists each skip with its reason)."""
    if os.environ.get("CI", "").strip().lower() not in ("true", "1", "yes"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped and session.exitstatus == 0:
        reporter.write_line(f"CI=true: {len(skipped)} test(s) skipped; each must run in CI (see -rs above)", red=True)
        session.exitstatus = 1


@pytest.fixture(scope="session")
def run_in_nemo(nemo_python: Path) -> Callable[..., Any]:
    """``run(script, payload, timeout=300)``: run a Python script in NeMo Gym's venv with ``payload`` as JSON on
    its stdin, and return its last stdout line parsed as JSON (for tests that compare ngym with NeMo itself)."""

    def run(script: str, payload: Any, timeout: float = 300) -> Any:
        done = subprocess.run(
            [str(nemo_python), "-c", script], input=json.dumps(payload), capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run
