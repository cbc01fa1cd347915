"""The trainer venv (tools/trainer_venv.sh) for tests that train with a real trainer's own code."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "trainer_venv.sh"


@pytest.fixture(scope="session")
def trainer_python() -> Path:
    """The trainer venv's python. Outside CI a venv not yet made skips (it takes ~8 min and ~6 GB); under
    CI=true it is made, and a failure to make it fails the test."""
    in_ci = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
    if not in_ci:
        ready = subprocess.run(["bash", str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60)
        if ready.returncode != 0:
            pytest.skip("no trainer venv yet (make it with tools/trainer_venv.sh, ~8 min)")
    made = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=3600)
    if made.returncode != 0:
        pytest.fail(f"tools/trainer_venv.sh failed: {made.stderr.strip()[-2000:]}")
    return Path(made.stdout.strip().splitlines()[-1]) / "bin" / "python"
