"""The ``openreward`` SDK (in the one trainer venv, tools/trainer_venv.sh) for the tests that drive ngym with ORS's
own client."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def ors_python(trainer_python: Path) -> Path:
    """The trainer venv's python (openreward 0.1.167 and TRL's ORS binding are there; tests/conftest.py makes it)."""
    return trainer_python
