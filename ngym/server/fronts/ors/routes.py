"""The ORS HTTP routes of one environment, as ``openreward.environments.Server`` serves them.

Served under the front's mount (``/ors``). Environment-level routes answer both at the bare path (``/tools``,
which the ``openreward`` client uses) and under the environment's name (``/<env_name>/tools``, the reference
server's canonical form); another name is a 404. Session routes take the ORS session id in ``X-Session-ID``.
Bad input is a 4xx with a ``detail`` saying what to fix: 400 (not JSON, unknown split, bad index, missing
``X-Session-ID``), 404 (unknown environment or session), 422 (a body of the wrong shape, naming the field).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from importlib import metadata
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router

from ngym.errors import ConfigError
from ngym.server.fronts.ors import sse, tasks, wire
from ngym.server.fronts.ors.episodes import KEPT_RESULTS, Episode, Episodes, FrontError
from ngym.server.fronts.ors.tools import Toolbox
from ngym.server.pipeline.intake import parse_json
from ngym.server.sessions.routing import RouteSlot

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]


class ORSFront:
    """One environment's ORS surface: its name, splits, tools and live episodes, and the routes over them."""

    def __init__(self, name: str, splits: list[tasks.Split], toolbox: Toolbox, episodes: Episodes) -> None:
        self.name = name
        self.splits = {split.name: split for split in splits}
        self.toolbox = toolbox
        self.episodes = episodes

    # ---- helpers -----------------------------------------------------------------------------------

    def _check_env(self, request: Request) -> None:
        env_name = request.path_params.get("env_name")
        if env_name is not None and env_name.lower() != self.name.lower():
            raise FrontError(404, f"unknown environment {env_name!r}: this server serves {self.name!r}")

    def _split(self, name: str) -> tasks.Split:
        split = self.splits.get(name)
        if split is None:
            raise FrontError(400, f"unknown split {name!r}; this environment has {sorted(self.splits)}")
        return split

    def _row(self, split_name: str, index: int) -> dict[str, Any]:
        rows = self._split(split_name).rows
        if not -len(rows) <= index < len(rows):
            raise FrontError(400, f"index {index} is out of range: split {split_name!r} has {len(rows)} tasks")
        return rows[index]

    def _episode(self, request: Request) -> Episode:
        return self.episodes.get(_sid(request))

    # ---- environment-level routes ------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": _version(), "build_sha": None})

    async def list_environments(self, request: Request) -> Response:
        return JSONResponse([self.name])

    async def list_tools(self, request: Request) -> Response:
        self._check_env(request)
        return JSONResponse(self.toolbox.listing())

    async def list_splits(self, request: Request) -> Response:
        self._check_env(request)
        return JSONResponse([split.as_wire() for split in self.splits.values()])

    async def list_tasks(self, request: Request) -> Response:
        self._check_env(request)
        body = await _body(request, wire.SplitBody)
        return JSONResponse({"tasks": self._split(body.split).rows, "env_name": self.name})

    async def num_tasks(self, request: Request) -> Response:
        self._check_env(request)
        body = await _body(request, wire.SplitBody)
        return JSONResponse({"num_tasks": len(self._split(body.split).rows)})

    async def get_task(self, request: Request) -> Response:
        self._check_env(request)
        body = await _body(request, wire.TaskBody)
        return JSONResponse({"task": self._row(body.split, body.index), "env_name": self.name})

    async def get_task_range(self, request: Request) -> Response:
        self._check_env(request)
        body = await _body(request, wire.TaskRangeBody)
        rows = self._split(body.split).rows[body.start : body.stop]
        return JSONResponse({"tasks": rows, "env_name": self.name})

    # ---- sessions ----------------------------------------------------------------------------------

    async def create_session(self, request: Request) -> Response:
        """A fresh ORS session id, as the reference server's ``/create_session`` stream gives it; drawn to route
        to this process (``RouteSlot.new_id``), so HAProxy sends every request carrying it here by its hash."""
        return sse.finished(RouteSlot.from_env().new_id(), "")

    async def delete_session(self, request: Request) -> Response:
        return JSONResponse({"sid": _sid(request)})

    async def create(self, request: Request) -> Response:
        sid = _sid(request)
        body = await _body(request, wire.CreateSession)
        if body.env_name is not None and body.env_name.lower() != self.name.lower():
            raise FrontError(404, f"unknown environment {body.env_name!r}: this server serves {self.name!r}")
        if body.toolset_name is not None:
            raise FrontError(400, f"unknown toolset {body.toolset_name!r}: ngym environments serve their own tools")
        if body.task_spec is not None:
            row = dict(body.task_spec)
        else:
            assert body.split is not None and body.index is not None  # the body model checked it
            row = self._row(body.split, body.index)
        await self.episodes.create(sid, row)
        return JSONResponse({"sid": sid})

    async def delete(self, request: Request) -> Response:
        sid = _sid(request)
        await self.episodes.delete(sid)
        return JSONResponse({"sid": sid})

    async def ping(self, request: Request) -> Response:
        self._episode(request)
        return JSONResponse({"status": "ok"})

    async def task_tools(self, request: Request) -> Response:
        self._check_env(request)
        return JSONResponse(self.toolbox.listing(self._episode(request).row))

    async def prompt(self, request: Request) -> Response:
        self._check_env(request)
        episode = self._episode(request)
        text = "\n\n".join(t for t in (tasks.prompt_text(episode.row), episode.observation) if t)
        return JSONResponse([wire.text_block(text)])

    async def messages(self, request: Request) -> Response:
        self._check_env(request)
        episode = self._episode(request)
        messages = tasks.prompt_messages(episode.row)
        if episode.observation:  # a Gymnasium-style environment's reset observation: the next user message
            messages.append({"role": "user", "blocks": [wire.text_block(episode.observation)]})
        return JSONResponse(messages)

    async def call(self, request: Request) -> Response:
        self._check_env(request)
        episode = self._episode(request)
        body = await _body(request, wire.ToolCall)
        if body.task_id is not None:  # a client resuming a cut stream: the same run, never a second one
            task = episode.results.get(body.task_id)
            if task is None:
                return sse.finished(body.task_id, None, "unknown task_id")
            return await sse.respond(body.task_id, task)
        task_id = uuid.uuid4().hex
        running: asyncio.Future[str] = asyncio.ensure_future(self._call_text(episode, body.name, dict(body.input)))
        episode.results[task_id] = running
        while len(episode.results) > KEPT_RESULTS:
            del episode.results[next(iter(episode.results))]
        return await sse.respond(task_id, running)

    async def _call_text(self, episode: Episode, name: str, arguments: dict[str, Any]) -> str:
        return json.dumps(await self.episodes.call(episode, name, arguments))

    async def score_group(self, request: Request) -> Response:
        self._check_env(request)
        raise FrontError(404, f"environment {self.name!r} does not implement score_group")

    # ---- the router --------------------------------------------------------------------------------

    def router(self) -> Router:
        routes = [
            Route("/health", _guard(self.health), methods=["GET"]),
            Route("/version", _guard(self.version), methods=["GET"]),
            Route("/list_environments", _guard(self.list_environments), methods=["GET"]),
            Route("/create_session", _guard(self.create_session), methods=["POST"]),
            Route("/delete_session", _guard(self.delete_session), methods=["POST"]),
            Route("/create", _guard(self.create), methods=["POST"]),
            Route("/delete", _guard(self.delete), methods=["POST"]),
            Route("/ping", _guard(self.ping), methods=["POST"]),
        ]
        per_environment: list[tuple[str, Handler, str]] = [
            ("/call", self.call, "POST"),
            ("/prompt", self.prompt, "GET"),
            ("/messages", self.messages, "GET"),
            ("/task_tools", self.task_tools, "GET"),
            ("/tools", self.list_tools, "GET"),
            ("/splits", self.list_splits, "GET"),
            ("/tasks", self.list_tasks, "POST"),
            ("/num_tasks", self.num_tasks, "POST"),
            ("/task", self.get_task, "POST"),
            ("/task_range", self.get_task_range, "POST"),
            ("/score_group", self.score_group, "POST"),
        ]
        for prefix in ("", "/{env_name}"):
            routes += [
                Route(prefix + path, _guard(handler), methods=[method]) for path, handler, method in per_environment
            ]
        return Router(routes=routes)


def _version() -> str:
    try:
        return metadata.version("ngym")
    except metadata.PackageNotFoundError:
        return "unknown"


def _sid(request: Request) -> str:
    sid = request.headers.get("x-session-id", "").strip()
    if not sid:
        raise FrontError(400, "X-Session-ID header is required (the id POST /create_session gave)")
    return sid


async def _body(request: Request, model: type[M]) -> M:
    raw = await request.body()
    try:
        data = parse_json(raw) if raw else {}
    except ValueError as exc:
        raise FrontError(400, f"the body is not JSON: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise FrontError(422, errors) from None


def _guard(handler: Handler) -> Handler:
    """A route answering a ``FrontError`` (or the request limits' refusal) as its status with a JSON ``detail``."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except FrontError as exc:
            return JSONResponse({"detail": exc.detail}, status_code=exc.status)
        except ConfigError as exc:  # the server's own data (a split's file) is broken: say which
            return JSONResponse({"detail": str(exc)}, status_code=500)
        except HTTPException as exc:  # the request limits' 413 and 408
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    guarded.__name__ = getattr(handler, "__name__", "route")
    return guarded
