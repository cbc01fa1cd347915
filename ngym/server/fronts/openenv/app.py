"""The routes of the OpenEnv front: OpenEnv's HTTP server (``/health`` … ``/mcp``) and its ``/ws`` episodes.

Built on the front's first request (``ngym.server.fronts.openenv.mount``). Parse → episode → the environment's
route: no session or reward logic lives here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from importlib import metadata as distribution
from typing import Any

import pydantic_core
from fastapi import Body, FastAPI, Request, Response, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from ngym.server.fronts.openenv import jsonrpc, naming
from ngym.server.fronts.openenv.episode import Episode, EpisodeError, action_errors
from ngym.server.fronts.openenv.front import OpenEnvFront
from ngym.server.fronts.openenv.rows import RowError
from ngym.server.fronts.openenv.wire import (
    CAPACITY_REACHED,
    EXECUTION_ERROR,
    INVALID_JSON,
    INVALID_PARAMS,
    PARSE_ERROR,
    SESSION_ERROR,
    UNKNOWN_TYPE,
    VALIDATION_ERROR,
    EpisodeObservation,
    EpisodeState,
    Health,
    Metadata,
    ResetBody,
    StepAnswer,
    StepBody,
    ToolAction,
    rpc_error,
    ws_error,
)
from ngym.server.pipeline.intake import parse_json
from ngym.server.pipeline.websocket_protocol import SocketGone, direct_socket
from ngym.server.sessions.routing import OPENENV_EPISODE_COOKIE
from ngym.server.sessions.store import SessionLimitReached

#: The start of an observation message (``{"type": "observation", "data": ...}`` as ``to_json`` writes it).
_OBSERVATION = b'{"type":"observation","data":'

#: The cookie naming an episode held between HTTP requests (``/reset`` sets it, ``/step`` and ``/state`` read it).
EPISODE_COOKIE = OPENENV_EPISODE_COOKIE


def create_front_app(server: Any, parent: FastAPI) -> FastAPI:
    """The OpenEnv app of one server (mounted under ``/openenv`` of ``parent``, whose routes it calls)."""
    front = OpenEnvFront(server, parent)
    name = front.name
    app = FastAPI(
        title=f"{name} (OpenEnv protocol)",
        version=_version(),
        description="OpenEnv's protocol over an ngym environment: one episode = one session of the server.",
    )
    app.state.front = front

    @app.exception_handler(naming.AmbiguousEpisode)
    async def ambiguous(request: Request, exc: naming.AmbiguousEpisode) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    @app.get("/health", response_model=Health, tags=["Health"])
    async def health() -> Health:
        return Health()

    @app.get("/metadata", response_model=Metadata, tags=["Environment Info"])
    async def get_metadata() -> Metadata:
        description = type(server).describe() or f"ngym environment {name}"
        return Metadata(name=name, description=description, version=_version(), author=None)

    @app.get("/schema", tags=["Schema"])
    async def get_schema() -> dict[str, Any]:
        return {
            "action": ToolAction.model_json_schema(),
            "observation": EpisodeObservation.model_json_schema(),
            "reset_observation": EpisodeObservation.model_json_schema(),
            "state": EpisodeState.model_json_schema(),
        }

    @app.post("/reset", response_model=StepAnswer, tags=["Environment Control"])
    async def reset(request: Request, body: ResetBody = Body(default_factory=ResetBody)) -> Any:
        held = front.find_episode(_named(request))
        try:
            episode = held or await front.open_episode()
        except SessionLimitReached as exc:
            return _at_capacity(exc)
        async with episode.lock:
            answer = await _guarded_http(episode.reset(_reset_arguments(body.model_dump(exclude_none=True))))
        if isinstance(answer, Response):
            if held is None:  # the episode opened for this reset holds nothing: not kept
                front.episodes.pop(episode.episode_id, None)
            return answer
        response = JSONResponse(answer)
        response.set_cookie(EPISODE_COOKIE, episode.episode_id, httponly=True, samesite="lax")
        return response

    @app.post("/step", response_model=StepAnswer, tags=["Environment Control"])
    async def step(request: Request, body: StepBody) -> Any:
        errors = action_errors(body.action)
        if errors:  # refused before anything else, as OpenEnv's server validates the action first
            return JSONResponse({"detail": errors}, status_code=422)
        named = _named(request)
        episode = front.find_episode(named)
        if episode is None:
            elsewhere = front.elsewhere(named)
            if elsewhere is not None:
                return JSONResponse({"detail": elsewhere}, status_code=503, headers={"retry-after": "1"})
            detail = "no episode: POST /reset first (it sets the episode cookie), or use the /ws WebSocket"
            return JSONResponse({"detail": detail}, status_code=409)
        async with episode.lock:
            return await _guarded_http(episode.step(body.action))

    @app.get("/state", response_model=EpisodeState, tags=["State Management"])
    async def state(request: Request) -> Any:
        named = _named(request)
        episode = front.find_episode(named)
        elsewhere = front.elsewhere(named) if episode is None else None
        if elsewhere is not None:
            return JSONResponse({"detail": elsewhere}, status_code=503, headers={"retry-after": "1"})
        return episode.state() if episode is not None else EpisodeState().model_dump()

    @app.post("/mcp", tags=["MCP"])
    async def mcp(request: Request) -> Any:
        body = await request.body()
        try:
            naming.check_one_session_id(body)
        except naming.AmbiguousEpisode as exc:
            return JSONResponse(rpc_error(INVALID_PARAMS, str(exc)), status_code=400)
        try:
            payload = parse_json(body)
        except ValueError as exc:
            return JSONResponse(rpc_error(PARSE_ERROR, f"Parse error: {exc}"))
        return JSONResponse(await jsonrpc.handle(front, payload))

    @app.websocket("/ws")
    async def websocket(socket: WebSocket) -> None:
        await _serve_socket(front, socket)

    return app


async def _guarded_http(work: Any) -> Any:
    """An episode action's wire answer; a bad action is a 4xx with the reason, a full server a 503."""
    try:
        outcome = await work
    except EpisodeError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)
    except RowError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=422)
    except SessionLimitReached as exc:
        return _at_capacity(exc)
    return outcome.wire()


def _at_capacity(exc: SessionLimitReached) -> JSONResponse:
    return JSONResponse({"detail": f"server is at its session limit ({exc})"}, status_code=503)


async def _serve_socket(front: OpenEnvFront, socket: WebSocket) -> None:
    """One connection: its own episode (closed with it), or the held one ``?session_id=`` names."""
    await socket.accept()
    try:
        attached = naming.socket_session_id(socket.query_params.getlist("session_id"))
    except naming.AmbiguousEpisode as exc:
        await socket.send_text(json.dumps(ws_error(str(exc), SESSION_ERROR)))
        await socket.close()
        return
    if attached:
        held = front.find_episode(attached)
        if held is None or attached in front.attached:
            if held is not None:
                message = f"session_id {attached} is already attached to a WebSocket"
            else:
                message = front.elsewhere(attached) or f"session_id {attached} is unknown"
            await socket.send_text(json.dumps(ws_error(message, SESSION_ERROR)))
            await socket.close()
            return
        front.attached.add(attached)
        episode = held
    else:
        episode = front.new_episode()
    try:
        # In a task of its own: waiting for each message suspends this short stack, not the app's whole stack of
        # middleware and routes above this handler (each resumption runs through every frame of the stack).
        await asyncio.ensure_future(_exchange(front, episode, *_message_io(socket)))
    except (WebSocketDisconnect, RuntimeError, SocketGone):  # the client went away (mid-answer: on send)
        pass
    finally:
        if attached:
            front.attached.discard(attached)  # the held episode stays until openenv/session/close
        else:
            async with episode.lock:
                await episode.close()
    # already closed by the client: a close frame sent (RuntimeError) or the connection dropped (WebSocketDisconnect)
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        await socket.close()


async def _exchange(
    front: OpenEnvFront,
    episode: Episode,
    receive: Callable[[], Awaitable[str]],
    send: Callable[[bytes], Awaitable[None]],
) -> None:
    """Answer the connection's messages one by one until its ``close`` message."""
    while True:
        answer = await _answer(front, episode, await receive())
        if answer is None:
            return
        await send(answer if type(answer) is bytes else pydantic_core.to_json(answer))


def _message_io(socket: WebSocket) -> tuple[Callable[[], Awaitable[str]], Callable[[bytes], Awaitable[None]]]:
    """How an accepted socket's messages are read (as text; a binary message as its UTF-8 text) and written (as
    UTF-8 bytes): straight on the connection when ngym's WebSocket protocol serves it
    (``websocket_protocol.DirectSocket``: no ASGI event and no ``send`` wrapper per message), else through
    Starlette's ``WebSocket``."""
    direct = direct_socket(socket.scope)
    if direct is not None:
        return direct.receive_text, direct.send_text

    async def receive() -> str:  # as ``DirectSocket.receive_text``: a binary message is read as UTF-8 text
        message = await socket.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        text = message.get("text")
        return str(text) if text is not None else bytes(message.get("bytes") or b"").decode("utf-8", "replace")

    async def send(payload: bytes) -> None:
        await socket.send_text(payload.decode())

    return receive, send


async def _answer(front: OpenEnvFront, episode: Episode, raw: str) -> dict[str, Any] | bytes | None:
    """The answer to one WebSocket message, as a value or already encoded (None for ``close``)."""
    try:
        message = front.messages.parse(raw)  # shared with other episodes: read, never changed
    except ValueError as exc:
        return ws_error(f"Invalid JSON: {exc}", INVALID_JSON)
    if not isinstance(message, dict):
        return ws_error("a message is a JSON object with a type", VALIDATION_ERROR)
    kind = message.get("type", "")
    data = message.get("data") if message.get("data") is not None else {}
    if not isinstance(data, dict):
        return ws_error(f"{kind}: data must be an object", VALIDATION_ERROR)
    try:
        if kind == "reset":
            async with episode.lock:
                outcome = await episode.reset(_reset_arguments(data))
            return _OBSERVATION + outcome.wire_json() + b"}"
        if kind == "step":
            async with episode.lock:
                outcome = await episode.step(data)
            return _OBSERVATION + outcome.wire_json() + b"}"
        if kind == "state":
            return {"type": "state", "data": episode.state()}
        if kind == "close":
            return None
        if kind == "mcp":  # takes the episode's lock itself for a tool call
            return {"type": "mcp", "data": await jsonrpc.handle(front, data, episode)}
        return ws_error(f"Unknown message type: {kind}", UNKNOWN_TYPE)
    except ValidationError as exc:
        return ws_error("Invalid message", VALIDATION_ERROR, errors=json.loads(exc.json()))
    except EpisodeError as exc:
        return ws_error(str(exc), CAPACITY_REACHED if exc.status == 503 else VALIDATION_ERROR)
    except RowError as exc:
        return ws_error(str(exc), VALIDATION_ERROR)
    except SessionLimitReached as exc:
        return ws_error(f"server is at its session limit ({exc})", CAPACITY_REACHED)
    except Exception as exc:  # the environment failed: the client reads why, the connection stays usable
        return ws_error(f"{type(exc).__name__}: {exc}", EXECUTION_ERROR)


def _named(request: Request) -> str | None:
    """The episode the request's cookie names (``AmbiguousEpisode``, a 400, when it names two)."""
    return naming.episode_cookie(request.scope["headers"])


def _reset_arguments(data: dict[str, Any]) -> dict[str, Any]:
    """The row-picking arguments of a reset (``ResetBody``'s fields; the rest, e.g. ``episode_id``, ignored),
    checked without copying the row (a row with its tools is kilobytes, and a reset per episode)."""
    arguments = {key: data[key] for key in ("seed", "task_index", "row") if data.get(key) is not None}
    for key in ("seed", "task_index"):
        value = arguments.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise RowError(f"reset's {key} must be a non-negative integer, got {value!r}")
    return arguments


def _version() -> str:
    try:
        return distribution.version("ngym")
    except distribution.PackageNotFoundError:
        return "0"
