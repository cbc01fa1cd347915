"""``nemo_gym.base_environment_server`` (episode servers) and ``RewardProfiler``'s per-rollout rows."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi.testclient import TestClient
from nemo_gym.base_environment_server import (
    BaseEnvironmentServer,
    BaseEnvironmentServerConfig,
    CleanupContext,
    HandledEpisodeError,
)
from nemo_gym.config_types import AggregateMetrics, AggregateMetricsRequest
from nemo_gym.episode_types import BaseEpisodeRequest, BaseEpisodeResponse, EpisodeFailure
from nemo_gym.reward_profile import RewardProfiler
from pydantic import ValidationError


class Request(BaseEpisodeRequest[dict[str, Any]]):
    pass


class Response(BaseEpisodeResponse[float]):
    pass


class Episodes(BaseEnvironmentServer[Request, Response]):
    request_model = Request
    response_model = Response
    cleaned: list[str] = []

    async def run(self, request: Request, cleanup: CleanupContext) -> Response:
        async def release(name: str) -> None:
            self.cleaned.append(name)

        cleanup.register_cleanup("first", lambda: release("first"))
        cleanup.register_cleanup("second", lambda: release("second"))
        mode = request.task.task_input.get("mode")
        if mode == "handled":
            raise HandledEpisodeError(EpisodeFailure(failure_reason="no answer", stage="verify"))
        if mode == "crash":
            raise RuntimeError("boom")
        if mode == "slow":
            await asyncio.sleep(5)
        return Response(episode_id=request.episode_id, task_id=request.task.task_id, result=1.0)

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        return AggregateMetrics(agent_metrics={"episodes": len(body.verify_responses)})


def _episode(mode: str) -> dict[str, Any]:
    return {
        "episode_id": {"rollout_id": "r1"},
        "task": {"task_id": {"taskset": "t", "task_id": "1"}, "task_input": {"mode": mode}},
    }


def _client(**config: Any) -> tuple[Episodes, TestClient]:
    server = Episodes(config=BaseEnvironmentServerConfig(name="e", cleanup_timeout_seconds=2, **config), cleaned=[])
    return server, TestClient(server.setup_webserver())


@pytest.mark.parametrize(
    ("mode", "result", "failure"),
    [
        ("ok", 1.0, None),
        ("handled", None, {"failure_reason": "no answer", "terminal": False, "stage": "verify"}),
        ("crash", None, {"failure_reason": "Unhandled environment server error: RuntimeError: boom", "terminal": True}),
    ],
)
def test_an_episode_answers_200_with_its_result_or_failure_and_always_cleans_up(
    mode: str, result: float | None, failure: dict[str, Any] | None
) -> None:
    server, client = _client()
    answer = client.post("/run", json=_episode(mode))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["result"] == result
    if failure is None:
        assert body["failure"] is None
    else:
        assert {key: body["failure"][key] for key in failure} == failure
    assert server.cleaned == ["second", "first"]  # last registered first


def test_the_episode_deadline_is_a_failure_not_an_error() -> None:
    server, client = _client(default_episode_timeout_seconds=0.2)
    body = client.post("/run", json=_episode("slow")).json()
    assert body["failure"]["failure_reason"] == "Episode timed out" and body["failure"]["terminal"] is False
    assert server.cleaned == ["second", "first"]


def test_an_admission_limit_needs_a_queue_timeout() -> None:
    with pytest.raises(ValidationError, match="queue_timeout_seconds is required"):
        BaseEnvironmentServerConfig(name="e", cleanup_timeout_seconds=1, max_concurrent_episodes=2)


def test_aggregate_metrics_route_calls_the_subclass() -> None:
    _, client = _client()
    answer = client.post("/aggregate_metrics", json={"verify_responses": [{"reward": 1.0}]})
    assert answer.json()["agent_metrics"] == {"episodes": 1}


def test_reward_profiler_rows_keep_numbers_and_leave_bookkeeping_out() -> None:
    result = {
        "_ng_task_index": 2,
        "_ng_rollout_index": 1,
        "_ng_group_attempt": 3,
        "reward": 0.5,
        "passed": True,
        "label": "text",
        "response": {"usage": {"input_tokens": 7, "output_tokens": 3}},
    }
    assert RewardProfiler().rollout_info_from_result(result) == {
        "rollout_id": "2:1",
        "_ng_task_index": 2,
        "_ng_rollout_index": 1,
        "reward": 0.5,
        "input_tokens": 7,
        "output_tokens": 3,
        "passed": 1,
    }


def test_reward_profiler_aligns_results_with_inputs_and_refuses_strays() -> None:
    rows = [{"_ng_task_index": t, "_ng_rollout_index": 0} for t in range(3)]
    results = [{"_ng_task_index": t, "_ng_rollout_index": 0, "reward": 1.0} for t in (0, 2)]
    profiler = RewardProfiler()
    with pytest.raises(ValueError, match="Missing rollout results for 1"):
        profiler.align_rows_and_results(rows, results)
    assert [r["_ng_task_index"] for r, _ in profiler.align_rows_and_results(rows, results, True)] == [0, 2]
    with pytest.raises(ValueError, match="extra rollout rows"):
        profiler.align_rows_and_results(rows[:1], results)
    summary = profiler.profile_completion_summary(rows, results)
    assert (summary["completed_rollout_rows"], summary["missing_input_rows"]) == (2, 1)
