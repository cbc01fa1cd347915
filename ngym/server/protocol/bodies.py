"""Request and response bodies of the resources-server routes (NeMo Gym's names and shapes)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from ngym.server.protocol.failure_kinds import check_failure_kind
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
    """The verify request echoed back with its ``reward`` (0.0–1.0) and any metrics the server adds.

    ``mask_sample``, ``failure_kind`` and ``failure_reason`` are NeMo Gym 0.7.0's: a masked sample's reward
    is not a measurement of the policy (the judge or the environment failed), so ``/aggregate_metrics``
    leaves it out of the quality metrics; the kind and reason say what happened, independently of masking.
    """

    reward: float
    mask_sample: bool = Field(
        default=False,
        description="True when the reward is not a valid measurement of the policy (the environment, its judge "
        "or its infrastructure failed): the sample is left out of evaluation scores.",
    )
    failure_kind: str | None = Field(
        default=None,
        description="What kind of failure this was: a name from ngym.server.protocol.failure_kinds (NeMo Gym's shared "
        "vocabulary) or '<server>:<kind>'. Low cardinality, safe to group by.",
    )
    failure_reason: str | None = Field(default=None, description="Human-readable detail of the failure.")

    @field_validator("failure_kind")
    @classmethod
    def _known_kind(cls, value: str | None) -> str | None:
        return check_failure_kind(value)


class BaseMultiRewardVerifyResponse(BaseVerifyResponse):
    """A verify response of an environment with several reward objectives.

    ``reward`` stays the scalar single-reward consumers read; ``reward_components`` maps each objective to its
    value (keep the keys the same for every task). ``/aggregate_metrics`` does not descend into the mapping:
    expose an objective as a top-level number too when it should be aggregated.
    """

    reward_components: dict[str, float]


class BaseSeedSessionRequest(BaseModel):
    """The body of ``POST /seed_session``: the dataset row. Subclass it to declare the fields you read."""


class BaseSeedSessionResponse(BaseModel):
    """The body ``POST /seed_session`` answers with (``{}`` unless the server adds fields)."""


_ROLLOUT_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
_ATTEMPT_SUFFIX = re.compile(r"-a[1-9][0-9]*$")


class EpisodeId(BaseModel):
    """One physical attempt of a logical rollout (NeMo Gym 0.7.0's ``EpisodeId``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rollout_id: str = Field(min_length=1, pattern=_ROLLOUT_ID)
    attempt: int = Field(default=0, ge=0)

    @field_validator("rollout_id")
    @classmethod
    def _no_attempt_suffix(cls, rollout_id: str) -> str:
        # "<id>-a<N>" is how an attempt other than 0 is keyed: a rollout id ending so would collide with it.
        if _ATTEMPT_SUFFIX.search(rollout_id):
            raise ValueError("rollout_id must not end with the reserved attempt suffix '-a<N>'")
        return rollout_id

    @property
    def capture_key(self) -> str:
        """The attempt-qualified key: the rollout id, plus ``-a<N>`` for attempts after the first."""
        return self.rollout_id if self.attempt == 0 else f"{self.rollout_id}-a{self.attempt}"


class TaskId(BaseModel):
    """One task of a run-unique taskset (``<environment>:<taskset>`` by convention in blended runs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    taskset: str = Field(min_length=1)
    task_id: str = Field(min_length=1)


class ResourcesSeedSessionRequest(BaseModel):
    """NeMo Gym 0.7's typed seed: a caller-chosen session id. Seeding the same id and episode is idempotent."""

    model_config = ConfigDict(extra="forbid")

    resources_session_id: str = Field(min_length=1)
    episode_id: EpisodeId
    task_id: TaskId
    task_data: dict[str, JsonValue]


class MCPServerMetadata(BaseModel):
    """How an agent reaches a rollout's tools over MCP: sent in the seed response (``mcp`` / ``resources_tools``)."""

    server_name: str
    url_path: str = "/mcp"
    transport: str = "http"
    headers: dict[str, str]


class ResourcesSeedSessionResponse(BaseModel):
    """The typed seed's answer: exactly these keys (NeMo Gym 0.7.0's model forbids others)."""

    model_config = ConfigDict(extra="forbid")

    resources_session_id: str
    resources_tools: MCPServerMetadata | None = None
    sandbox_access: dict[str, JsonValue] | None = None


class ResourcesCloseSessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resources_session_id: str
    episode_id: EpisodeId


class ResourcesCloseSessionResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resources_session_id: str


class AggregateMetricsRequest(BaseModel):
    """``POST /aggregate_metrics``: verify responses, each with ``_ng_task_index`` and ``_ng_rollout_index``."""

    verify_responses: list[dict[str, Any]]


class AggregateMetrics(BaseModel):
    group_level_metrics: list[dict[str, Any]] = Field(default_factory=list)
    agent_metrics: dict[str, Any] = Field(default_factory=dict)
    key_metrics: dict[str, Any] = Field(default_factory=dict)
    #: One row of statistics per repeat (``_ng_rollout_index``), when there is more than one (NeMo Gym 0.7.0's).
    repeat_level_metrics: list[dict[str, Any]] = Field(default_factory=list)
