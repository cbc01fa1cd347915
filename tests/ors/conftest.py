"""The ``openreward`` SDK's venv (tools/ors_venv.sh) for the tests that drive ngym with ORS's own client."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ORS_VENV_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "ors_venv.sh"


@pytest.fixture(scope="session")
def ors_python() -> Path:
    """The python of the ORS client venv. Outside CI a venv that is not made yet skips the test; under CI=true it
    is made (about a minute), and a failure to make it fails the test."""
    in_ci = os.environ.get("CI", "").lower() == "true"
    if not in_ci and not os.environ.get("NGYM_ORS_VENV"):
        probe = subprocess.run(["bash", str(ORS_VENV_SCRIPT), "--probe"], capture_output=True, text=True)
        if probe.returncode != 0:
            pytest.skip("no ORS client venv yet (make it with tools/ors_venv.sh, or run `make ors`)")
    made = subprocess.run(["bash", str(ORS_VENV_SCRIPT)], capture_output=True, text=True, timeout=900)
    if made.returncode != 0:
        pytest.fail(f"tools/ors_venv.sh failed: {made.stderr.strip()[-2000:]}")
    return Path(made.stdout.strip().splitlines()[-1]) / "bin" / "python"
