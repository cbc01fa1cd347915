"""OpenEnv's MCP JSON-RPC (``POST /mcp`` and the WebSocket's ``mcp`` messages) over the front's episodes.

``tools/list`` lists the tool routes; ``tools/call`` runs one in the session's episode (seeding it with the next
row if it was never reset); OpenEnv's ``openenv/session/create`` and ``openenv/session/close`` open and close an
episode held between requests (``MCPToolClient`` opens one, then attaches its WebSocket to it). Every answer is
a JSON-RPC 2.0 object, errors included, with HTTP 200, as OpenEnv's server answers.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ngym.server.fronts.openenv.episode import Episode, EpisodeError
from ngym.server.fronts.openenv.rows import RowError
from ngym.server.fronts.openenv.wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    rpc_error,
    rpc_result,
)
from ngym.server.sessions.store import SessionLimitReached

if TYPE_CHECKING:
    from ngym.server.fronts.openenv.front import OpenEnvFront


async def handle(front: OpenEnvFront, payload: Any, connection: Episode | None = None) -> dict[str, Any]:
    """Answer one JSON-RPC request; ``connection`` is the episode of the WebSocket it came on, if any."""
    if not isinstance(payload, dict) or payload.get("jsonrpc") != "2.0" or not isinstance(payload.get("method"), str):
        return rpc_error(INVALID_REQUEST, 'Invalid request: expected {"jsonrpc": "2.0", "method": ..., "id": ...}')
    method, request_id = payload["method"], payload.get("id")
    params = payload.get("params") or {}
    if not isinstance(params, dict):
        return rpc_error(INVALID_PARAMS, "Params must be an object", request_id)
    try:
        return rpc_result(await _dispatch(front, method, params, connection), request_id)
    except _RpcFailure as exc:
        return rpc_error(exc.code, str(exc), request_id)
    except (EpisodeError, RowError) as exc:
        return rpc_error(INVALID_PARAMS, str(exc), request_id)
    except SessionLimitReached as exc:
        return rpc_error(INTERNAL_ERROR, f"server is at its session limit ({exc})", request_id)
    except Exception as exc:  # an environment's failure is the caller's error answer, not a dropped request
        return rpc_error(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", request_id)


class _RpcFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def _dispatch(front: OpenEnvFront, method: str, params: dict[str, Any], connection: Episode | None) -> Any:
    if method == "tools/list":
        return {"tools": front.mcp_tool_list()}
    if method == "tools/call":
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise _RpcFailure(INVALID_PARAMS, "Missing 'name' in params")
        arguments = params.get("arguments") or {}
        episode = connection or _held(front, params.get("session_id"))
        async with episode.lock:
            if episode.row is None:
                await episode.reset({})
            outcome = await episode.step({"tool_name": name, "arguments": arguments})
        return _tool_result(outcome.wire())
    if method == "openenv/session/create":
        if connection is not None:
            return {"session_id": connection.episode_id}
        return {"session_id": (await front.open_episode()).episode_id}
    if method == "openenv/session/close":
        session_id = params.get("session_id")
        if not session_id:
            raise _RpcFailure(INVALID_PARAMS, "Invalid params - 'session_id' is required")
        if not await front.drop_episode(str(session_id)):
            raise _RpcFailure(INVALID_PARAMS, f"Unknown session_id: {session_id}")
        return {"session_id": session_id, "closed": True}
    raise _RpcFailure(METHOD_NOT_FOUND, f"Method not found: {method}")


def _held(front: OpenEnvFront, session_id: Any) -> Episode:
    if not session_id:
        raise _RpcFailure(INVALID_PARAMS, "tools/call needs a session_id: call openenv/session/create first")
    episode = front.find_episode(str(session_id))
    if episode is None:
        raise _RpcFailure(INVALID_PARAMS, front.elsewhere(str(session_id)) or f"Unknown session_id: {session_id}")
    return episode


def _tool_result(answer: dict[str, Any]) -> dict[str, Any]:
    """An MCP ``CallToolResult`` (text content, structured content, ``isError``) plus ``data``, the parsed
    result OpenEnv's ``MCPToolClient.call_tool`` returns; the final answer's also carries ``reward``/``done``."""
    observation = answer["observation"]
    error = observation.get("error")
    data = observation.get("result")
    text = json.dumps(data) if not isinstance(data, str) else data
    if error:
        text = error.get("message", "") if isinstance(error, dict) else str(error)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": bool(error), "data": data}
    if isinstance(data, dict):
        result["structuredContent"] = data
    if answer.get("done"):
        result.update(reward=answer.get("reward"), done=True)
    return result
