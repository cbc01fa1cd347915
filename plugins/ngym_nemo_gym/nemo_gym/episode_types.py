"""NeMo Gym's episode identifiers: ngym's own ``EpisodeId`` / ``TaskId`` (the typed seed and close bodies use them)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from ngym import EpisodeId, TaskId

__all__ = ["BaseEpisodeRequest", "BaseEpisodeResponse", "EpisodeFailure", "EpisodeId", "TaskId"]

TaskInputT = TypeVar("TaskInputT")
EpisodeResultT = TypeVar("EpisodeResultT")


class EpisodeFailure(BaseModel):
    """Why an episode produced no valid result: ``failure_reason`` for people, ``failure_kind`` to group by."""

    failure_reason: str
    terminal: bool = False
    failure_kind: str | None = None
    stage: str | None = None


class MaterializedTask(BaseModel, Generic[TaskInputT]):
    task_id: TaskId
    task_input: TaskInputT


class BaseEpisodeRequest(BaseModel, Generic[TaskInputT]):
    model_config = ConfigDict(extra="forbid")

    episode_id: EpisodeId
    task: MaterializedTask[TaskInputT]


class BaseEpisodeResponse(BaseModel, Generic[EpisodeResultT]):
    episode_id: EpisodeId
    task_id: TaskId
    result: EpisodeResultT | None = None
    failure: EpisodeFailure | None = None
    metrics: dict[str, Any] = {}
