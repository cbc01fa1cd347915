"""What an agent harness observed during one rollout (NeMo Gym's ``nemo_gym.rollout_observability`` schema).

An agent server returns these records when its session closes (``AgentCloseSessionResponse.agent_observations``):
its invocations (root agent and subagents), tool calls, sandboxes, context compactions, and the gaps it could not
observe. Trajectory records are the per-rollout view joined from them. Only the schema is provided: records are
strict (unknown fields are refused) and validated on assignment, so a producer's typo fails where it is made.
NeMo Gym's joining of model-call records into trajectories is rollout-collection tooling and is not provided.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from nemo_gym.config_types import ModelServerRef
from nemo_gym.openai_utils import NeMoGymResponseInputItem


class ObservationModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelCallRef(ObservationModel):
    """How to find one model call: its ``model_call_id``, or the model server and the response id it returned."""

    model_call_id: str | None = None
    model_ref: ModelServerRef | None = None
    response_id: str | None = None

    @model_validator(mode="after")
    def _joinable(self) -> ModelCallRef:
        if not self.model_call_id and not (self.model_ref is not None and self.response_id):
            raise ValueError("model_call_id or both model_ref and response_id are required")
        return self


class TrajectoryTokenStats(ObservationModel):
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    reasoning_tokens: int | None = Field(default=None, ge=0)
    total_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)


class TrajectoryResponseMetadata(ObservationModel):
    response_id: str | None = None
    model_ref: ModelServerRef | None = None
    model: str | None = None
    dialect: str | None = None
    status_code: int | None = None
    response_status: str | None = None
    finish_reason: str | None = None
    upstream_attempted: bool | None = None
    response_source: Literal["upstream", "local"] | None = None
    upstream_status_code: int | None = None
    local_response_reason: str | None = None
    error_category: str | None = None
    latency_ttft_ms: float | None = Field(default=None, ge=0)


class TrajectoryModelCall(ObservationModel):
    model_call_id: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration_ms: float | None = Field(default=None, ge=0)
    request: Any | None = None
    response: Any | None = None
    response_metadata: TrajectoryResponseMetadata = Field(default_factory=TrajectoryResponseMetadata)
    token_stats: TrajectoryTokenStats = Field(default_factory=TrajectoryTokenStats)


class TrajectoryTurn(ObservationModel):
    """One turn of one invocation; ``step_count`` is the producer's running count of steps in it."""

    invocation_id: str
    task_id: str
    rollout_id: str
    turn_no: int = Field(ge=1)
    timestamp: float
    question: Any | None = None
    answer: Any | None = None
    reasoning_content: Any | None = None
    resolved: bool | None = None
    step_count: int = Field(ge=0)
    model_calls: list[ModelCallRef] = Field(default_factory=list)


class AgentInvocation(ObservationModel):
    """One conversation of the root agent or of a subagent (``parent_invocation_id``, the tool call that spawned it)."""

    kind: Literal["agent_invocation"] = "agent_invocation"
    invocation_id: str
    parent_invocation_id: str | None = None
    spawned_by_tool_call_id: str | None = None
    status: Literal["completed", "failed", "incomplete", "unknown"] = "unknown"
    duration_ms: float | None = Field(default=None, ge=0)
    error_type: str | None = None
    model_calls: list[ModelCallRef] = Field(default_factory=list)
    conversation: list[NeMoGymResponseInputItem] = Field(default_factory=list)


class ToolCallObservation(ObservationModel):
    """When one tool call ran and how it ended, as seen at a boundary the agent owns."""

    kind: Literal["tool_call"] = "tool_call"
    invocation_id: str
    tool_call_id: str
    sandbox_id: str | None = None  # the sandbox it ran in (shared by concurrent calls), not a per-call resource
    tool_name: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    duration_ms: float | None = Field(default=None, ge=0)
    timing_source: Literal["executor", "artifact", "harness"] | None = None
    status: Literal["completed", "failed", "timeout", "cancelled", "incomplete", "unknown"] = "unknown"
    error_type: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> ToolCallObservation:
        if self.started_at is not None and self.completed_at is not None and self.completed_at < self.started_at:
            raise ValueError("completed_at must not precede started_at")
        return self


class TrajectoryToolCall(ToolCallObservation):
    """A tool call with the output the model saw."""

    output: Any | None = None


class SandboxObservation(ObservationModel):
    """How a sandbox ended and what it used over its life (measured values, never configured limits)."""

    kind: Literal["sandbox"] = "sandbox"
    role: Literal["agent", "verifier", "environment"]
    provider: str | None = None
    sandbox_id: str | None = None
    outcome: Literal["completed", "failed", "timeout", "oom", "sandbox_error", "cancelled", "unknown"] = "unknown"
    exit_code: int | None = None
    wall_time_s: float | None = Field(default=None, ge=0)
    cpu_time_s: float | None = Field(default=None, ge=0)
    peak_memory_mib: float | None = Field(default=None, ge=0)
    resource_usage_source: str | None = None
    error_type: str | None = None


class ContextCompactionObservation(ObservationModel):
    """The harness compacted an invocation's context (token counts as the producer reports them)."""

    kind: Literal["context_compaction"] = "context_compaction"
    invocation_id: str
    observed_at: float | None = None
    trigger: str | None = None
    tokens_before: int | None = Field(default=None, ge=0)
    tokens_after: int | None = Field(default=None, ge=0)
    outcome: Literal["completed", "failed", "aborted", "unknown"] = "unknown"
    summary: str | None = None
    first_kept_item_id: str | None = None
    before_model_call: ModelCallRef | None = None
    model_calls: list[ModelCallRef] = Field(default_factory=list)
    after_model_call: ModelCallRef | None = None


class ObservationGap(ObservationModel):
    """Something the producer could not observe or join exactly (``code`` names what)."""

    code: str
    invocation_id: str | None = None
    detail: str | None = None


AgentObservationRecord = Annotated[
    AgentInvocation | ToolCallObservation | ContextCompactionObservation | SandboxObservation,
    Field(discriminator="kind"),
]


class AgentObservationBundle(ObservationModel):
    """One agent server's observations of one rollout; ``records`` are unordered."""

    source: str
    records: list[AgentObservationRecord] = Field(default_factory=list)
    gaps: list[ObservationGap] = Field(default_factory=list)

    @model_validator(mode="after")
    def _invocation_tree(self) -> AgentObservationBundle:
        invocations = [r for r in self.records if isinstance(r, AgentInvocation)]
        parent = {r.invocation_id: r.parent_invocation_id for r in invocations}
        if len(parent) != len(invocations):
            raise ValueError("invocation_id must be unique within an observation bundle")
        # A parent missing from the bundle is fine (a producer may see part of the tree); a cycle is not.
        for start in parent:
            seen: set[str] = set()
            current: str | None = start
            while current is not None and current in parent:
                if current in seen:
                    raise ValueError("parent_invocation_id must not form a cycle")
                seen.add(current)
                current = parent[current]
        return self


class TrajectoryRecord(ObservationModel):
    """The joined view of one rollout: invocations, turns, model calls and tool calls."""

    schema_version: Literal["1.0"] = "1.0"
    task_id: str
    rollout_id: str
    invocations: list[AgentInvocation] = Field(default_factory=list)
    turns: list[TrajectoryTurn] = Field(default_factory=list)
    model_calls: list[TrajectoryModelCall] = Field(default_factory=list)
    tool_calls: list[TrajectoryToolCall] = Field(default_factory=list)
    gaps: list[ObservationGap] = Field(default_factory=list)

    @model_validator(mode="after")
    def _identity(self) -> TrajectoryRecord:
        invocation_ids = [i.invocation_id for i in self.invocations]
        if len(invocation_ids) != len(set(invocation_ids)):
            raise ValueError("invocation_id must be unique within a trajectory")
        call_ids = [c.model_call_id for c in self.model_calls if c.model_call_id]
        if len(call_ids) != len(set(call_ids)):
            raise ValueError("model_call_id must be unique within a trajectory")
        turns: set[tuple[str, int]] = set()
        for turn in self.turns:
            if (turn.task_id, turn.rollout_id) != (self.task_id, self.rollout_id):
                raise ValueError("turn identity must match the trajectory")
            if (turn.invocation_id, turn.turn_no) in turns:
                raise ValueError("turn number must be unique within an invocation")
            turns.add((turn.invocation_id, turn.turn_no))
        return self
