"""NeMo Gym's ``compute_repeat_metrics`` hook, written as a NeMo Gym environment writes it (finance_agent_v2:
the full-run ``compute_metrics`` rules applied to one repeat), answered by ngym's ``/aggregate_metrics`` on a
real port and read back with NeMo Gym's ``AggregateMetrics`` model (the compat layer's)."""

from __future__ import annotations

from typing import Any

import httpx
from nemo_gym.base_resources_server import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer
from nemo_gym.config_types import AggregateMetrics
from nemo_gym.reward_profile import AggregateMetricsMixin, compute_aggregate_metrics

from ngym.rollout.thread_server import serve_app_in_thread
from ngym.testing import app_for_class, make_response

ROW = {"responses_create_params": {"input": "2+2?"}}


class Graded(SimpleResourcesServer):
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=float("4" in body.response.output_text))

    def compute_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        solved = [max(r["reward"] for r in task) for task in tasks]
        return {"mean/solved": sum(solved) / len(solved), "rubric/tasks": len(tasks)}

    def compute_repeat_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        return {name: value for name, value in self.compute_metrics(tasks).items() if name.startswith("mean/")}


def test_the_nemo_style_hook_over_http() -> None:
    answers = {(0, 0): "4", (1, 0): "4", (0, 1): "4", (1, 1): "5", (2, 0): "5", (2, 1): "5"}
    with serve_app_in_thread(app_for_class(Graded, domain="math")) as url:
        rows = []
        for (task, repeat), text in answers.items():
            body = {**ROW, "response": make_response(text=text)}
            seed = httpx.post(f"{url}/seed_session", json=ROW)
            verify = httpx.post(
                f"{url}/verify", json=body, headers={"cookie": seed.headers["set-cookie"].split(";")[0]}
            )
            rows.append({**verify.json(), "_ng_task_index": task, "_ng_rollout_index": repeat})
        answer = httpx.post(f"{url}/aggregate_metrics", json={"verify_responses": rows})
    assert answer.status_code == 200, answer.text
    metrics = AggregateMetrics.model_validate(answer.json())
    assert [row["mean/solved"] for row in metrics.repeat_level_metrics] == [2 / 3, 1 / 3]
    assert metrics.agent_metrics["mean/solved"] == 2 / 3  # compute_metrics: over both repeats
    assert metrics.agent_metrics["mean_across_repeats/mean/solved"] == 0.5
    assert "mean_across_repeats/rubric/tasks" not in metrics.agent_metrics  # not returned per repeat
    # NeMo Gym's module-level function under its own name, without the hook: the generic rows only
    direct = compute_aggregate_metrics(rows, compute_metrics_fn=None, compute_repeat_metrics_fn=None)
    assert [r["mean/reward"] for r in direct.repeat_level_metrics] == [2 / 3, 1 / 3]
    assert "mean/solved" not in direct.repeat_level_metrics[0]
    assert AggregateMetricsMixin().compute_repeat_metrics([[{"reward": 1.0}]]) == {}
