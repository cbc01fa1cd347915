"""verl 0.9.1's own multi-turn ``ToolAgentLoop`` runs recorded rollouts against environments served by ``ngym run``:
its hermes parser reads the (scripted) model's tool calls, its create/execute/release runs them through the tools
``ngym train verl-tools`` configured, and ngym's ``compute_score`` on what the loop hands verl's reward function
gives the recorded reward, NeMo's wire's reward. All of an environment's rollouts run at once; no session is left."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.verl.test_verl_tools import live_sessions, recorded, tool_config, wire_reward

DRIVER = Path(__file__).with_name("agent_loop_driver.py")


@pytest.mark.parametrize("name", ["example_single_tool_call", "workplace_assistant", "example_session_state_mgmt"])
def test_tool_agent_loop_scores_recorded_rollouts(
    name: str, serve: Callable[[str], str], in_verl: Callable[..., Any], tmp_path: Path
) -> None:
    url = serve(name)
    rollouts = recorded(name) * (2 if name == "example_session_state_mgmt" else 1)  # the stateful one: 10 at once
    tool_config(url, tmp_path / "tools.yaml")
    answer = in_verl(DRIVER, {"config": str(tmp_path / "tools.yaml"), "url": url, "rollouts": rollouts})
    results = answer["results"]
    assert [r["score"] for r in results] == [r["reward"] for r in rollouts]
    assert [r["score"] for r in results] == [wire_reward(url, r) for r in rollouts]
    calls = [sum(1 for i in r["response"]["output"] if i.get("type") == "function_call") for r in rollouts]
    assert [r["tool_calls_in_response"] for r in results] == calls  # every recorded call went through the loop
    assert [r["tool_outputs_in_response"] for r in results] == calls
    assert [r["trajectory"].count("function_call_output") for r in results] == calls
    assert all(r["tool_rewards"] == [] for r in results)  # ngym tools give no step reward
    assert answer["generate_calls"] == sum(calls) + len(rollouts)  # one turn per call, then the final answer
    assert live_sessions(url) == 0


def test_a_tool_the_environment_could_not_seed_is_no_reward(in_verl: Callable[..., Any], tmp_path: Path) -> None:
    """The environment is full while the loop's tools create their instances (its ``max_sessions`` taken), and free
    again when verl's reward function runs: every rollout that called a tool gets **no reward** (NaN), not the score
    of a trajectory without the calls that were refused (the weather's verify would give it 0.0); the one rollout
    that called no tool is scored as recorded."""
    from ngym.child_server import free_port, stop_process, wait_healthy

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "ngym.cli", "run", "example_single_tool_call", "--port", str(port), "max_sessions=2"]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_healthy(url, process, 120)
        rollouts = recorded("example_single_tool_call")
        tool_config(url, tmp_path / "tools.yaml")
        payload = {"config": str(tmp_path / "tools.yaml"), "url": url, "rollouts": rollouts, "occupy": 2}
        answer = in_verl(DRIVER, {**payload, "on_masked": "nan"})
        calls = [sum(1 for i in r["response"]["output"] if i.get("type") == "function_call") for r in rollouts]
        assert 0 in calls and any(calls)
        for result, rollout, called in zip(answer["results"], rollouts, calls, strict=True):
            if called:
                assert result["score"] is None, result  # masked: verl's reward function gave NaN
                assert result["trajectory"] == [], result  # no call of it ran in the environment
            else:
                assert result["score"] == rollout["reward"], result
        assert live_sessions(url) == 0
    finally:
        stop_process(process)
