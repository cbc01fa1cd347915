"""The ORS request bodies and answers, as ``openreward`` 0.1.167's server and client exchange them.

Requests are validated here (extra keys refused, as the reference server does), so a malformed one is a 422
naming the field; answers are plain dicts in the shapes the ``openreward`` client reads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

SplitType = Literal["train", "validation", "test"]
#: Why a tool call did not run (``RunToolError.reason``): the client branches on these.
ErrorReason = Literal["not_found", "name_collision", "input_validation", "episode_finished"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateSession(_Body):
    """``POST /create``: a session's task, by ``split`` + ``index`` or as the row itself (``task_spec``)."""

    env_name: str | None = None
    task_spec: dict[str, Any] | None = None
    split: str | None = None
    index: int | None = None
    toolset_name: str | None = None

    @model_validator(mode="after")
    def _one_task_source(self) -> CreateSession:
        by_index = self.split is not None and self.index is not None
        if (self.task_spec is not None) == by_index:
            raise ValueError("Provide either task_spec or both split and index, not both/neither")
        return self


class ToolCall(_Body):
    """``POST /call``: a tool's name and input; ``task_id`` resumes a call whose stream was cut."""

    name: str
    input: dict[str, Any]
    task_id: str | None = None


class SplitBody(_Body):
    """``POST /tasks`` and ``POST /num_tasks``."""

    split: str


class TaskBody(_Body):
    """``POST /task``."""

    split: str
    index: int


class TaskRangeBody(_Body):
    """``POST /task_range`` (Python slice semantics: negative and missing bounds allowed)."""

    split: str
    start: int | None = None
    stop: int | None = None


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "detail": None}


def tool_success(text: str, *, reward: float | None, finished: bool, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """A ``RunToolSuccess``: the output blocks, the reward (``None``: no reward) and whether the episode ended."""
    output = {"blocks": [text_block(text)], "metadata": metadata, "reward": reward, "finished": finished}
    return {"ok": True, "output": output}


def tool_error(message: str, reason: ErrorReason) -> dict[str, Any]:
    """A ``RunToolError``: the call did not run (the client raises ``ToolCallError`` with ``reason``)."""
    return {"ok": False, "error": message, "reason": reason}
