"""OpenEnv 0.10's wire, as its server sends it and its clients read it: the bodies, the schemas ``/schema`` gives.

Written from OpenEnv's protocol (``openenv.core.env_server.types`` and ``mcp_types``), not imported: ngym does not
depend on OpenEnv. The fidelity tests drive this front with OpenEnv's own clients and validator.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# JSON-RPC 2.0 error codes (OpenEnv's JsonRpcErrorCode)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# WebSocket error codes (OpenEnv's WSErrorCode)
INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
SESSION_ERROR = "SESSION_ERROR"


class ToolAction(BaseModel):
    """An action: a tool call (``tool_name`` + ``arguments``, as OpenEnv's ``CallToolAction``), the final answer
    (``message``; or the ``final_answer`` tool with ``{"content": ...}``), or ``{"type": "list_tools"}``. Other
    fields are refused, as OpenEnv refuses them."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["call_tool", "list_tools"] | None = None
    tool_name: str | None = Field(default=None, description="The tool (route) to call")
    arguments: dict[str, Any] = Field(default_factory=dict, description="The tool's arguments (its body)")
    message: str | None = Field(default=None, description="The final answer: ends and verifies the episode")
    metadata: dict[str, Any] = Field(default_factory=dict)


class EpisodeObservation(BaseModel):
    """An observation: after ``reset`` the prompt and tools; after a tool call its output (``result``, parsed
    JSON when it is JSON; ``error`` when the tool failed); after the final answer the ``verification``."""

    prompt: list[Any] | None = None
    available_tools: list[dict[str, Any]] | None = None
    task_index: int | None = None
    episode_id: str | None = None
    seed: dict[str, Any] | None = None
    tool_name: str | None = None
    result: Any = None
    error: Any = None
    verification: dict[str, Any] | None = None
    done: bool = False
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class EpisodeState(BaseModel):
    """``/state``: the episode's id, steps taken, row, whether it ended and its reward (None until verified,
    and when the result was masked)."""

    episode_id: str | None = None
    step_count: int = 0
    task_index: int | None = None
    done: bool = False
    reward: float | None = None


class ResetBody(BaseModel):
    """``/reset``'s body (OpenEnv's ``ResetRequest``, plus how to pick the row)."""

    model_config = ConfigDict(extra="allow")

    seed: int | None = Field(default=None, ge=0, description="Picks row seed % rows when task_index is not given")
    episode_id: str | None = None
    task_index: int | None = Field(default=None, ge=0, description="Index of the example row to seed")
    row: dict[str, Any] | None = Field(default=None, description="A whole dataset row to seed instead")


class StepBody(BaseModel):
    """``/step``'s body (OpenEnv's ``StepRequest``)."""

    model_config = ConfigDict(extra="allow")

    action: dict[str, Any]
    timeout_s: float | None = None
    request_id: str | None = None


class StepAnswer(BaseModel):
    """``/reset`` and ``/step``'s answer (OpenEnv's ``ResetResponse``/``StepResponse``)."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] | None = None


class Metadata(BaseModel):
    name: str
    description: str
    readme_content: str | None = None
    version: str | None = None
    author: str | None = None
    documentation_url: str | None = None


class Health(BaseModel):
    status: Literal["healthy"] = "healthy"


def rpc_result(result: Any, request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result, "id": request_id}


def rpc_error(code: int, message: str, request_id: Any = None, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "error": error, "id": request_id}


def ws_error(message: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code, **extra}}
