"""NeMo Gym 0.7.0's wire models, field for field (the conformance suite checks the same against NeMo itself)."""

from __future__ import annotations

import logging
import uuid
from typing import Any, ClassVar

import pytest
from pydantic import ValidationError

from ngym import (
    BaseMultiRewardVerifyResponse,
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    Domain,
    EpisodeId,
    JudgeError,
    ReverifyMode,
    SimpleResourcesServer,
    TaskId,
)
from ngym.metrics.aggregate import aggregate_metrics
from ngym.server.protocol import ResourcesSeedSessionResponse, ResponseCreateParams
from ngym.server.protocol.failure_kinds import FAILURE_KINDS, check_failure_kind
from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process

# Every field of NeMo Gym 0.7.0's NeMoGymResponseCreateParamsNonStreaming: its agents send them all, null included.
NEMO_CREATE_PARAMS = [
    "background", "include", "input", "instructions", "max_output_tokens", "max_tool_calls", "metadata", "model",
    "parallel_tool_calls", "previous_response_id", "prompt", "reasoning", "service_tier", "store",
    "context_management", "conversation", "moderation", "prompt_cache_key", "prompt_cache_retention",
    "safety_identifier", "stream_options", "temperature", "text", "tool_choice", "tools", "top_logprobs", "top_p",
    "truncation", "user", "stream",
]  # fmt: skip


def test_every_create_param_nemo_sends_is_accepted_and_unknown_keys_are_not() -> None:
    sent: dict[str, Any] = {name: None for name in NEMO_CREATE_PARAMS}
    sent |= {"input": "hi", "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
    sent |= {"context_management": [{"type": "compaction"}], "conversation": "conv_1"}
    params = ResponseCreateParams.model_validate(sent)
    assert params.conversation == "conv_1"
    assert set(NEMO_CREATE_PARAMS) <= set(ResponseCreateParams.model_fields)
    with pytest.raises(ValidationError, match="no_such_param"):
        ResponseCreateParams.model_validate({"input": "hi", "no_such_param": 1})


def _verify_body(**extra: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": "q"}, "response": make_response(text="a"), **extra}


def test_verify_response_fields_and_defaults() -> None:
    response = BaseVerifyResponse.model_validate(_verify_body(reward=1.0))
    dumped = response.model_dump()
    assert (dumped["mask_sample"], dumped["failure_kind"], dumped["failure_reason"]) == (False, None, None)
    multi = BaseMultiRewardVerifyResponse.model_validate(_verify_body(reward=0.5, reward_components={"a": 1.0}))
    assert multi.reward_components == {"a": 1.0}
    with pytest.raises(ValidationError, match="reward_components"):
        BaseMultiRewardVerifyResponse.model_validate(_verify_body(reward=0.5))


def test_absent_training_tokens_are_not_echoed_as_null() -> None:
    body = BaseVerifyRequest.model_validate(_verify_body())
    item = body.model_dump()["response"]["output"][0]
    assert "prompt_token_ids" not in item and "generation_log_probs" not in item
    tokens = {"prompt_token_ids": [1], "generation_token_ids": [2], "generation_log_probs": [-0.1]}
    with_tokens = make_response(text="a")
    with_tokens["output"][0] |= tokens
    echoed = BaseVerifyRequest.model_validate(_verify_body(response=with_tokens)).model_dump()
    assert echoed["response"]["output"][0]["prompt_token_ids"] == [1]


def test_failure_kinds_registered_namespaced_and_unknown() -> None:
    assert {"judge_failed", "verifier_error", "session_lost", "transport_timeout"} <= FAILURE_KINDS
    # A handler and a level on the module's own logger: `ngym validate` (run by other tests in this process)
    # raises the "ngym" logger to ERROR.
    logger = logging.getLogger("ngym.server.protocol")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.WARNING)
    unknown = f"made_up_kind_{uuid.uuid4().hex[:8]}"
    try:
        assert check_failure_kind("judge_failed") == "judge_failed"
        assert check_failure_kind("weather:no_city") == "weather:no_city"
        assert not records
        assert check_failure_kind(unknown) == unknown  # kept, never dropped
        check_failure_kind(unknown)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
    assert len([r for r in records if unknown in r.getMessage()]) == 1  # once per name


def test_episode_and_task_ids_as_nemo_defines_them() -> None:
    assert EpisodeId(rollout_id="r-1.x_2").attempt == 0
    assert EpisodeId(rollout_id="r", attempt=2).capture_key == "r-a2"
    for bad in ({"rollout_id": "r-a3"}, {"rollout_id": "-r"}, {"rollout_id": ""}, {"rollout_id": "r", "attempt": -1}):
        with pytest.raises(ValidationError):
            EpisodeId.model_validate(bad)
    with pytest.raises(ValidationError):
        TaskId.model_validate({"taskset": "t", "task_id": "1", "extra": 1})
    with pytest.raises(ValidationError):
        ResourcesSeedSessionResponse.model_validate({"resources_session_id": "s", "other": 1})


class ConfigModeConfig(BaseResourcesServerConfig):
    REVERIFY_MODE: ClassVar[ReverifyMode] = ReverifyMode.STATELESS


class Metered(SimpleResourcesServer):
    """Reverify mode from its config class (NeMo Gym 0.7.0's place); its own metrics hooks."""

    config: ConfigModeConfig
    domain = Domain.OTHER

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        if "judge" in body.response.final_text():
            raise JudgeError("judge unreachable")
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)

    def compute_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        return {
            "tasks_seen": len(tasks),
            "per_task_metrics": [{"_ng_task_index": t[0]["_ng_task_index"], "n": len(t)} for t in tasks],
        }

    def get_key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        return {"tasks_seen": agent_metrics["tasks_seen"]}


async def test_reverify_mode_from_the_config_class_and_the_metrics_hooks() -> None:
    async with serve_in_process(app_for_class(Metered)) as http:
        assert (await http.get("/reverify_mode")).json() == "stateless"
        client = RolloutClient(http)
        ok = await client.call("/verify", _verify_body())
        failed = await client.call("/verify", {**_verify_body(), "response": make_response(text="ask the judge")})
        assert failed["mask_sample"] is True and failed["failure_kind"] == "judge_failed"
        rows = [{**ok, "_ng_task_index": 0}, {**ok, "_ng_task_index": 1}, {**failed, "_ng_task_index": 1}]
        metrics = (await http.post("/aggregate_metrics", json={"verify_responses": rows})).json()
    assert metrics["key_metrics"] == {
        "tasks_seen": 2,
        "coverage/measured_rollouts": 2,
        "coverage/masked_rollouts": 1,
        "coverage/measured_tasks": 2,
        "coverage/fully_masked_tasks": 0,
    }
    assert metrics["agent_metrics"]["mean/reward"] == 1.0  # the masked 0.0 is not averaged in
    assert "mean/mask_sample" not in metrics["agent_metrics"]
    assert [g["n"] for g in metrics["group_level_metrics"]] == [1, 1]


def test_every_sample_masked_reports_coverage_only() -> None:
    metrics = aggregate_metrics([{"_ng_task_index": 0, "reward": 0.0, "mask_sample": True}])
    assert (
        metrics.agent_metrics
        == metrics.key_metrics
        == {
            "coverage/measured_rollouts": 0,
            "coverage/masked_rollouts": 1,
            "coverage/measured_tasks": 0,
            "coverage/fully_masked_tasks": 1,
        }
    )
    assert metrics.group_level_metrics == []
