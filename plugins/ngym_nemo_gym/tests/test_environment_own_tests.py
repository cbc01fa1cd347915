"""A representative set of NeMo Gym 0.7.0's environments: their own tests pass under ngym, run as ``gym env test``
runs them (pytest inside the folder, pytest-asyncio in auto mode, ``resources_servers.<name>`` importable).

Pure-Python scorers, LLM-judge environments (their judges mocked by their own tests), Gymnasium-style games,
metrics hooks, multi-reward and typed-session examples. Each needs nothing beyond ngym-nemo-gym's dependencies.
"""

from __future__ import annotations

from typing import Any

import pytest
from ngym_nemo_gym.envtests import run_environment_tests

REPRESENTATIVE = [
    "example_single_tool_call",  # typed seed/close handled by the environment, session conformance, verifier fixture
    "example_session_state_mgmt",
    "example_tool_call_multireward",  # reward_components
    "example_multi_turn_gymnasium",  # /reset + /step on the Gymnasium base (a sibling environment)
    "blackjack",
    "wordle",
    "string_match",
    "mcqa",  # compute_metrics / get_key_metrics with pass@k helpers
    "bbq",
    "equivalence_llm_judge",  # call_judge, benchmark configs through GlobalConfigDictParser
    "aegis_v4_safety",
    "deepswe",  # nemo_gym.sandbox's spec and result types (its tests fake the container)
    "example_mcp_weather",  # tools over MCP through ngym's exposure, driven by the MCP SDK's client
]


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_environment_own_tests_pass(nemo_environment: Any, name: str) -> None:
    result = run_environment_tests(nemo_environment(name), timeout=600)
    assert result.ok, (
        f"{name}: {result.passed} passed, {result.failed} failed, {result.errors} errors\n{result.output[-4000:]}"
    )
