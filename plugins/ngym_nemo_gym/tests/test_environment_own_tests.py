"""A representative set of NeMo Gym 0.7.0's environments: their own tests pass under ngym, run as ``gym env test``
runs them (pytest inside the folder, pytest-asyncio in auto mode, ``resources_servers.<name>`` importable).

Pure-Python scorers, LLM-judge environments (their judges mocked by their own tests), Gymnasium-style games,
metrics hooks, multi-reward and typed-session examples. Each needs nothing beyond ngym-nemo-gym's dependencies.
"""

from __future__ import annotations

from typing import Any

import pytest
from ngym_nemo_gym.envtests import run_environment_tests

#: The environments whose own tests ``make nemo-ci`` does not run already (it runs 25 more the same way,
#: ``tools/nemo_ci.py``'s ``CI_ENVIRONMENTS``: the Gymnasium games, the judges, metrics hooks, typed sessions…).
REPRESENTATIVE = [
    "bbq",
    "deepswe",  # nemo_gym.sandbox's spec and result types (its tests fake the container)
    "example_mcp_weather",  # tools over MCP through ngym's exposure, driven by the MCP SDK's client
]


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_environment_own_tests_pass(nemo_environment: Any, name: str) -> None:
    result = run_environment_tests(nemo_environment(name), timeout=600)
    assert result.ok, (
        f"{name}: {result.passed} passed, {result.failed} failed, {result.errors} errors\n{result.output[-4000:]}"
    )
