"""Request and response bodies of the resources-server routes (NeMo Gym's names and shapes)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ngym.server.protocol.responses import Response, ResponseCreateParams

TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
FAILURE_CLASS_KEY = "_ng_failure_class"
FAILURE_JUDGE_ERROR_KEY = "_ng_failure_judge_error"


class BaseRunRequest(BaseModel):
    """A dataset row: the model's request parameters plus whatever fields the environment reads."""

    model_config = ConfigDict(populate_by_name=True)

    responses_create_params: ResponseCreateParams


class BaseVerifyRequest(BaseRunRequest):
    """The row plus the finished ``response``, sent to ``POST /verify``."""

    response: Response


class BaseVerifyResponse(BaseVerifyRequest):
    """The verify request echoed back with its ``reward`` (0.0–1.0) and any metrics the server adds."""

    reward: float


class BaseSeedSessionRequest(BaseModel):
    """The body of ``POST /seed_session``: the dataset row. Subclass it to declare the fields you read."""


class BaseSeedSessionResponse(BaseModel):
    """The body ``POST /seed_session`` answers with (``{}`` unless the server adds fields)."""


class EpisodeId(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    attempt: int = 0


class TaskId(BaseModel):
    model_config = ConfigDict(extra="forbid")

    taskset: str
    task_id: str


class ResourcesSeedSessionRequest(BaseModel):
    """NeMo Gym 0.7's typed seed: a caller-chosen session id. Seeding the same id and episode is idempotent."""

    model_config = ConfigDict(extra="forbid")

    resources_session_id: str = Field(min_length=1)
    episode_id: EpisodeId
    task_id: TaskId
    task_data: dict[str, JsonValue]


class ResourcesSeedSessionResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    resources_session_id: str


class ResourcesCloseSessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resources_session_id: str
    episode_id: EpisodeId


class ResourcesCloseSessionResponse(BaseModel):
    resources_session_id: str


class AggregateMetricsRequest(BaseModel):
    """``POST /aggregate_metrics``: verify responses, each with ``_ng_task_index`` and ``_ng_rollout_index``."""

    verify_responses: list[dict[str, Any]]


class AggregateMetrics(BaseModel):
    group_level_metrics: list[dict[str, Any]] = Field(default_factory=list)
    agent_metrics: dict[str, Any] = Field(default_factory=dict)
    key_metrics: dict[str, Any] = Field(default_factory=dict)
