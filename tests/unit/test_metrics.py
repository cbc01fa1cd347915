"""aggregate_metrics: NeMo Gym's keys, per task and overall."""

from __future__ import annotations

import pytest

from ngym.metrics.aggregate import aggregate_metrics, pass_at_k


def test_group_and_agent_statistics() -> None:
    responses = [
        {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0, "accuracy": True, "text": "x"},
        {"_ng_task_index": 0, "_ng_rollout_index": 1, "reward": 0.0, "accuracy": False},
        {"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 1.0, "accuracy": True},
        {"_ng_task_index": 1, "_ng_rollout_index": 1, "reward": 1.0, "accuracy": True},
    ]
    metrics = aggregate_metrics(responses)
    first, second = metrics.group_level_metrics
    assert (
        first["_ng_task_index"] == 0
        and first["mean/reward"] == 0.5
        and first["std/reward"] == pytest.approx(0.7071, 1e-3)
    )
    assert second["min/reward"] == 1.0 and second["mean/accuracy"] == 1.0
    agent = metrics.agent_metrics
    assert agent["mean/reward"] == 0.75 and agent["median/reward"] == 1.0 and agent["max/reward"] == 1.0
    assert "mean/text" not in agent and "mean/_ng_rollout_index" not in agent
    assert agent["pass@1/reward"] == 0.75 and agent["pass@2/reward"] == 1.0
    assert metrics.key_metrics["mean/reward"] == 0.75


def test_pass_at_k_needs_binary_values() -> None:
    assert pass_at_k([[0.5, 1.0]]) == {}
    assert pass_at_k([[0.0, 0.0, 1.0]])["pass@2"] == pytest.approx(1 - 1 / 3)


async def test_route(weather_http) -> None:  # type: ignore[no-untyped-def]
    body = {"verify_responses": [{"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0}]}
    result = (await weather_http.post("/aggregate_metrics", json=body)).json()
    assert result["agent_metrics"]["mean/reward"] == 1.0
    assert set(result) == {"group_level_metrics", "agent_metrics", "key_metrics", "repeat_level_metrics"}
    assert result["repeat_level_metrics"] == [] and result["agent_metrics"]["num_repeats"] == 1


def test_private_bookkeeping_fields_are_not_measured() -> None:
    """``_``-prefixed fields (a collector's ``_ng_group_attempt``, ``_ng_attempt_index``) are not metrics, as in
    NeMo Gym 0.7.0, whose metric input skips them."""
    responses = [
        {"_ng_task_index": 0, "_ng_rollout_index": i, "_ng_group_attempt": 2, "_private": 1.5, "reward": 1.0}
        for i in range(2)
    ]
    metrics = aggregate_metrics(responses)
    assert not [name for name in metrics.agent_metrics if "/_" in name]
    assert not [name for name in metrics.group_level_metrics[0] if "/_" in name]
    assert metrics.agent_metrics["mean/reward"] == 1.0
