"""The ORS HTTP routes of one environment, as ``openreward.environments.Server`` serves them.

Served under the front's mount (``/ors``). Environment-level routes answer both at the bare path (``/tools``,
which the ``openreward`` client uses) and under the environment's name (``/<env_name>/tools``, the reference
server's canonical form); another name is a 404. Session routes take the ORS session id in ``X-Session-ID``.
Bad input is a 4xx with a ``detail`` saying what to fix: 400 (not JSON, unknown split, bad index, missing
``X-Session-ID``), 404 (unknown environment or session), 422 (a body of the wrong shape, naming the field).

What does not change within an environment is computed once and kept as bytes: the tool listing, the splits, a
split's tasks, and per session its prompt and tool listing. Routes are found by one dictionary lookup.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from importlib import metadata
from typing import Any, TypeVar

import pydantic_core
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ngym.errors import ConfigError
from ngym.server.fronts.ors import sse, tasks, wire
from ngym.server.fronts.ors.episodes import KEPT_RESULTS, RESUMABLE_BYTES, Episode, Episodes, FrontError
from ngym.server.fronts.ors.rows import RowTable
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
        self.rows = RowTable(toolbox)
        self.slot = RouteSlot.from_env()
        self._listing: bytes | None = None
        self._splits: bytes | None = None
        self._tasks: dict[str, bytes] = {}

    # ---- helpers -----------------------------------------------------------------------------------

    def serves(self, env_name: str) -> bool:
        """Whether ``env_name`` names this environment: its name in any case, with or without underscores (an
        installed ORS environment's own name, ``Environment.name().lower()``: ``quizenvironment`` for
        ``quiz_environment``)."""
        wanted = env_name.lower()
        return wanted == self.name.lower() or wanted == self.name.lower().replace("_", "")

    def _check_env(self, request: Request) -> None:
        env_name = request.path_params.get("env_name")
        if env_name is not None and not self.serves(env_name):
            raise FrontError(404, f"unknown environment {env_name!r}: this server serves {self.name!r}")

    def _split(self, name: str) -> tasks.Split:
        split = self.splits.get(name)
        if split is None:
            raise FrontError(400, f"Invalid split: {name!r}; this environment has {sorted(self.splits)}")
        return split

    def _row(self, split_name: str, index: int) -> dict[str, Any]:
        return self._split(split_name).rows[self._index(split_name, index)]

    def _index(self, split_name: str, index: int) -> int:
        """``index`` as a non-negative index of the split (400 when out of range)."""
        count = len(self._split(split_name).rows)
        if not -count <= index < count:
            raise FrontError(400, f"Invalid index: {index} is out of range, split {split_name!r} has {count} tasks")
        return index % count

    def _episode(self, request: Request) -> Episode:
        return self.episodes.get(_sid(request))

    # ---- environment-level routes ------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return _json({"status": "ok"})

    async def version(self, request: Request) -> Response:
        return _json({"version": _version(), "build_sha": None})

    async def list_environments(self, request: Request) -> Response:
        return _json([self.name])

    @property
    def listing(self) -> bytes:
        """``GET /tools``'s answer: the environment's tools and the final-answer tool."""
        if self._listing is None:
            self._listing = pydantic_core.to_json(self.toolbox.listing())
        return self._listing

    async def list_tools(self, request: Request) -> Response:
        self._check_env(request)
        return _raw(self.listing)

    async def list_splits(self, request: Request) -> Response:
        self._check_env(request)
        if self._splits is None:
            self._splits = pydantic_core.to_json([split.as_wire() for split in self.splits.values()])
        return _raw(self._splits)

    async def list_tasks(self, request: Request) -> Response:
        self._check_env(request)
        body = await _body(request, wire.SplitBody)
        listed = self._tasks.get(body.split)
        if listed is None:
            rows = self._split(body.split).rows
            listed = self._tasks[body.split] = pydantic_core.to_json({"tasks": rows, "env_name": self.name})
        return _raw(listed)

    async def num_tasks(self, request: Request) -> Response:
        self._check_env(request)
        body = await _body(request, wire.SplitBody)
        return _json({"num_tasks": len(self._split(body.split).rows)})

    async def get_task(self, request: Request) -> Response:
        self._check_env(request)
        body = await _body(request, wire.TaskBody)
        return _json({"task": self._row(body.split, body.index), "env_name": self.name})

    async def get_task_range(self, request: Request) -> Response:
        self._check_env(request)
        body = await _body(request, wire.TaskRangeBody)
        rows = self._split(body.split).rows[body.start : body.stop]
        return _json({"tasks": rows, "env_name": self.name})

    # ---- sessions ----------------------------------------------------------------------------------

    async def create_session(self, request: Request) -> Response:
        """A fresh ORS session id, as the reference server's ``/create_session`` stream gives it; drawn to route
        to this process (``RouteSlot.new_id``), so HAProxy sends every request carrying it here by its hash."""
        return sse.finished(self.slot.new_id(), "")

    async def delete_session(self, request: Request) -> Response:
        return _json({"sid": _sid(request)})

    async def create(self, request: Request) -> Response:
        sid = _sid(request)
        body = await _body(request, wire.CreateSession)
        if body.env_name is not None and not self.serves(body.env_name):
            raise FrontError(404, f"unknown environment {body.env_name!r}: this server serves {self.name!r}")
        if body.toolset_name is not None:
            raise FrontError(400, f"unknown toolset {body.toolset_name!r}: ngym environments serve their own tools")
        if body.task_spec is not None:
            await self.episodes.create(sid, self.rows.of_spec(dict(body.task_spec)))
        else:
            assert body.split is not None and body.index is not None  # the body model checked it
            await self.open_episode(sid, body.split, body.index)
        return _json({"sid": sid})

    async def open_episode(self, sid: str, split: str, index: int) -> None:
        """``/create`` by split and index: seed the episode ``sid`` with that row (``FrontError`` when refused)."""
        index = self._index(split, index)
        await self.episodes.create(sid, self.rows.of_split(split, index, self._split(split).rows[index]))

    async def delete(self, request: Request) -> Response:
        sid = _sid(request)
        await self.episodes.delete(sid)
        return _json({"sid": sid})

    async def ping(self, request: Request) -> Response:
        self._episode(request)
        return _json({"status": "ok"})

    async def task_tools(self, request: Request) -> Response:
        self._check_env(request)
        return _raw(self._episode(request).facts.listing)

    async def prompt(self, request: Request) -> Response:
        self._check_env(request)
        episode = self._episode(request)
        if episode.observation:  # a Gymnasium-style environment's reset observation, after the row's prompt
            text = "\n\n".join(t for t in (tasks.prompt_text(episode.row), episode.observation) if t)
            return _raw(pydantic_core.to_json([wire.text_block(text)]))
        return _raw(episode.facts.prompt)

    async def messages(self, request: Request) -> Response:
        self._check_env(request)
        episode = self._episode(request)
        if episode.observation:  # a Gymnasium-style environment's reset observation: the next user message
            messages = tasks.prompt_messages(episode.row)
            messages.append({"role": "user", "blocks": [wire.text_block(episode.observation)]})
            return _raw(pydantic_core.to_json(messages))
        return _raw(episode.facts.messages)

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
        running: asyncio.Future[bytes] = asyncio.ensure_future(self.call_json(episode, body.name, dict(body.input)))
        self.keep_result(episode, task_id, running)
        return await sse.respond(task_id, running)

    async def call_json(self, episode: Episode, name: str, arguments: dict[str, Any]) -> bytes:
        """Run one tool call of ``episode``: its ``RunToolOutput`` answer as JSON."""
        return pydantic_core.to_json(await self.episodes.call(episode, name, arguments))

    @staticmethod
    def keep_result(episode: Episode, task_id: str, result: asyncio.Future[bytes]) -> None:
        """Keep a call's result under its task id for a client resuming its cut stream: the last few, and of the
        earlier ones only those under ``RESUMABLE_BYTES`` (a client resumes the call whose stream was cut, before
        its next call; four answers of up to ``max_tool_answer_bytes`` each were kept beside the trajectory: 60 MB
        more per session)."""
        for older, kept in list(episode.results.items()):
            if (
                kept.done()
                and not kept.cancelled()
                and kept.exception() is None
                and len(kept.result()) > RESUMABLE_BYTES
            ):
                del episode.results[older]
        episode.results[task_id] = result
        while len(episode.results) > KEPT_RESULTS:
            del episode.results[next(iter(episode.results))]

    async def score_group(self, request: Request) -> Response:
        self._check_env(request)
        raise FrontError(404, f"environment {self.name!r} does not implement score_group")

    # ---- the router --------------------------------------------------------------------------------

    def router(self) -> Dispatch:
        """The front as a plain ASGI app (see ``Dispatch``)."""
        top: list[tuple[str, Handler, str]] = [
            ("/health", self.health, "GET"),
            ("/version", self.version, "GET"),
            ("/list_environments", self.list_environments, "GET"),
            ("/create_session", self.create_session, "POST"),
            ("/delete_session", self.delete_session, "POST"),
            ("/create", self.create, "POST"),
            ("/delete", self.delete, "POST"),
            ("/ping", self.ping, "POST"),
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
        return Dispatch(_table(top + per_environment), _table(per_environment))


class Dispatch:
    """Plain ASGI: a route by one dictionary lookup of the path (``/<route>``, or ``/<env_name>/<route>`` for an
    environment-level route), the method checked; 404 and 405 answered as Starlette's router does."""

    def __init__(self, bare: dict[str, dict[str, Handler]], named: dict[str, dict[str, Handler]]) -> None:
        self.bare = bare
        self.named = named

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        methods = self.bare.get(path)
        if methods is None:
            env_name, slash, route = path[1:].partition("/")
            if slash and env_name:
                methods = self.named.get("/" + route)
                if methods is not None:
                    scope["path_params"] = {"env_name": env_name}
        if methods is None:
            response: Response = _json({"detail": "Not Found"}, 404)
        else:
            handler = methods.get(scope["method"])
            if handler is None:
                response = _json({"detail": "Method Not Allowed"}, 405, {"allow": ", ".join(sorted(methods))})
            else:
                response = await handler(Request(scope, receive))
        await response(scope, receive, send)


def _table(routes: list[tuple[str, Handler, str]]) -> dict[str, dict[str, Handler]]:
    table: dict[str, dict[str, Handler]] = {}
    for path, handler, method in routes:
        methods = table.setdefault(path, {})
        methods[method] = _guard(handler)
        if method == "GET":
            methods["HEAD"] = methods["GET"]
    return table


def _json(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(pydantic_core.to_json(content), status, headers, "application/json")


def _raw(body: bytes) -> Response:
    """An answer already encoded as JSON."""
    return Response(body, 200, None, "application/json")


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
    """The body as ``model``; refused as FastAPI refuses a body (what ``openreward``'s server answers): 422 with
    ``detail`` a list of ``{type, loc: ["body", ...], msg, input}`` (``json_invalid`` for a body that is not JSON,
    ``missing`` at ``["body"]`` for none)."""
    raw = await request.body()
    if not raw:
        raise FrontError(422, [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}])
    try:
        data = parse_json(raw)
    except ValueError:
        raise FrontError(422, [_json_invalid(raw)]) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = []
        for error in exc.errors(include_url=False):
            shown: dict[str, Any] = {"type": error["type"], "loc": ["body", *error["loc"]], "msg": error["msg"]}
            shown["input"] = error.get("input")
            if "ctx" in error:  # an exception in it (a model validator's) is shown as {}, as FastAPI shows it
                shown["ctx"] = {k: v if isinstance(v, str | int | float) else {} for k, v in error["ctx"].items()}
            errors.append(shown)
        raise FrontError(422, errors) from None


def _json_invalid(raw: bytes) -> dict[str, Any]:
    """FastAPI's error for a body that is not JSON (it parses with ``json.loads``): where and why it stopped."""
    try:
        json.loads(raw)
    except ValueError as exc:
        position, reason = getattr(exc, "pos", 0), getattr(exc, "msg", str(exc))
    else:  # valid for json, not for the stricter parser (e.g. nesting beyond its limit)
        position, reason = 0, "the body nests too deeply or is not UTF-8"
    return {
        "type": "json_invalid",
        "loc": ["body", position],
        "msg": "JSON decode error",
        "input": {},
        "ctx": {"error": reason},
    }


def refusal(exc: Exception) -> Response | None:
    """The answer to a route's ``FrontError`` (or the request limits' refusal): its status with a JSON ``detail``;
    None for any other exception."""
    if isinstance(exc, FrontError):
        return _json({"detail": exc.detail}, exc.status)
    if isinstance(exc, ConfigError):  # the server's own data (a split's file) is broken: say which
        return _json({"detail": str(exc)}, 500)
    if isinstance(exc, HTTPException):  # the request limits' 413 and 408
        return _json({"detail": exc.detail}, exc.status_code, dict(exc.headers or {}))
    return None


def _guard(handler: Handler) -> Handler:
    """A route answering its refusals (``refusal``) as their status with a JSON ``detail``."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except (FrontError, ConfigError, HTTPException) as exc:
            answer = refusal(exc)
            assert answer is not None
            return answer

    guarded.__name__ = getattr(handler, "__name__", "route")
    return guarded
