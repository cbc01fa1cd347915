"""skyrl-gym 0.4.0's own ``make`` and its step loop drive environments served by ``ngym run`` through their recorded
rollouts: rewards equal the recorded reward and NeMo's wire; no session is left; a masked verify is no reward
(SkyRL's step reward is a float: it raises, or is NaN when asked), never 0.0."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.verl.test_verl_tools import live_sessions, parsed, recorded, wire_reward

DRIVER = Path(__file__).with_name("skyrl_driver.py")


@pytest.mark.parametrize("name", ["example_single_tool_call", "workplace_assistant", "example_session_state_mgmt"])
def test_skyrl_env_replays_recorded_rollouts(
    name: str, serve: Callable[[str], str], in_verl: Callable[..., Any]
) -> None:
    url = serve(name)
    rollouts = recorded(name)
    answer = in_verl(DRIVER, {"url": url, "rollouts": rollouts})
    assert answer["registered"]
    results = answer["results"]
    assert [r["error"] for r in results] == [None] * len(rollouts)
    assert [r["reward"] for r in results] == [r["reward"] for r in rollouts]
    assert [r["reward"] for r in results] == [wire_reward(url, r) for r in rollouts]
    assert all(r["done"] for r in results)
    for result, rollout in zip(results, rollouts, strict=True):
        want = [i["output"] for i in rollout["response"]["output"] if i.get("type") == "function_call_output"]
        assert parsed(result["outputs"]) == parsed(want)
    assert live_sessions(url) == 0


def test_skyrl_env_masked_result_is_no_reward(serve: Callable[[str], str], in_verl: Callable[..., Any]) -> None:
    url = serve("example_session_state_mgmt")
    rollouts = recorded("example_session_state_mgmt")[:1]
    raised = in_verl(DRIVER, {"url": url, "rollouts": rollouts, "lose_session": True})["results"][0]
    assert raised["error"] and "MaskedReward" in raised["error"] and "session_lost" in raised["error"]
    nan = in_verl(DRIVER, {"url": url, "rollouts": rollouts, "lose_session": True, "on_masked": "nan"})["results"][0]
    assert nan["reward"] == "nan" and nan["done"] and nan["error"] is None
    assert live_sessions(url) == 0


def test_skyrl_env_on_an_environment_that_is_gone_is_no_reward(in_verl: Callable[..., Any]) -> None:
    """The environment cannot be reached (a port nothing listens on): the rollout starts, its tool calls are not run
    (each observation says so) and it ends masked (``MaskedReward``, or NaN), never scored."""
    from ngym.child_server import free_port

    gone = f"http://127.0.0.1:{free_port()}"
    rollouts = [r for r in recorded("example_single_tool_call") if r["reward"] == 1.0][:1]
    raised = in_verl(DRIVER, {"url": gone, "rollouts": rollouts})["results"][0]
    assert raised["error"] and "MaskedReward" in raised["error"], raised
    nan = in_verl(DRIVER, {"url": gone, "rollouts": rollouts, "on_masked": "nan"})["results"][0]
    assert nan["reward"] == "nan" and nan["done"] and nan["error"] is None, nan
    assert nan["outputs"] and all("not run" in text for text in nan["outputs"]), nan["outputs"]
