"""An environment's ``compute_repeat_metrics`` over real HTTP: verified rollouts of two repeats posted to
``/aggregate_metrics`` on a real port come back with the hook's numbers per repeat and across repeats."""

from __future__ import annotations

from typing import Any

import httpx

from ngym.rollout.thread_server import serve_app_in_thread
from ngym.testing import app_for_class, make_response
from resources_servers.example_single_tool_call.app import WeatherResourcesServer

ROW = {"responses_create_params": {"input": "weather in Paris?"}}


class WeatherPerRepeat(WeatherResourcesServer):
    """The weather example with a per-repeat metric: the share of tasks whose every rollout called get_weather."""

    def compute_repeat_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        return {"all_called": sum(all(r["reward"] == 1.0 for r in task) for task in tasks) / len(tasks)}


def verified(url: str, called: bool) -> dict[str, Any]:
    calls = [("get_weather", {"city": "Paris"})] if called else None
    seed = httpx.post(f"{url}/seed_session", json=ROW)
    cookie = seed.headers["set-cookie"].split(";")[0]
    body = {**ROW, "response": make_response(text="cold", calls=calls)}
    answer = httpx.post(f"{url}/verify", json=body, headers={"cookie": cookie})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_hook_reaches_aggregate_metrics() -> None:
    with serve_app_in_thread(app_for_class(WeatherPerRepeat)) as url:
        # repeat 0: both tasks called the tool; repeat 1: only task 0 did
        plan = {(0, 0): True, (1, 0): True, (0, 1): True, (1, 1): False}
        rows = [
            {**verified(url, called), "_ng_task_index": task, "_ng_rollout_index": repeat}
            for (task, repeat), called in plan.items()
        ]
        answer = httpx.post(f"{url}/aggregate_metrics", json={"verify_responses": rows})
    assert answer.status_code == 200, answer.text
    metrics = answer.json()
    repeats = metrics["repeat_level_metrics"]
    assert [r["_ng_rollout_index"] for r in repeats] == [0, 1]
    assert [r["all_called"] for r in repeats] == [1.0, 0.5]
    assert [r["mean/reward"] for r in repeats] == [1.0, 0.5]
    assert all(r["sample_count"] == 2 and r["missing_count"] == 0 for r in repeats)
    agent = metrics["agent_metrics"]
    assert agent["mean_across_repeats/all_called"] == 0.75
    assert agent["min_across_repeats/all_called"] == 0.5 and agent["max_across_repeats/all_called"] == 1.0
    assert agent["ci_low_95_across_repeats/all_called"] < 0.5 < 1.0 < agent["ci_high_95_across_repeats/all_called"]
    assert agent["mean_across_repeats/mean/reward"] == 0.75 and agent["num_repeats"] == 2
    assert "all_called" not in agent  # a per-repeat metric, not a full-run one
