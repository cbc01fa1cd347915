"""A training client's ORS requests, answered as plain ASGI ahead of the front's router.

A training client's rollout (``openreward``'s session, as TRL's ``OpenRewardSpec`` drives it) is ``/create_session``,
``/create``, a first ``/ping``, ``/prompt``, one ``/call`` per tool call, the final answer's ``/call``, ``/delete``
and ``/delete_session``. Only ``/create`` (the seed) and the ``/call``\\ s run the environment; the other five read
or drop an entry of the episode table. All are answered here, before the front's router: no request object, no
route table, no response object, no body model. The five answer ready-made bytes (a session's prompt and tool
listing are kept per row, see ``rows.RowFacts``) with ready-made headers, so they cost the HTTP server's own work
and a dictionary lookup; ``/create`` and ``/call`` run the same episode code as the router's routes (``/call`` in
this task, with a timer for a call still running after ``sse.PING_SECONDS``: ``sse.answer_inline``).

Only the plain case is answered here: the bare route (``/ping``, not ``/<env_name>/ping``), its method, an
``X-Session-ID`` naming a live episode where one is needed, a row without a Gymnasium observation for the prompt,
a body within the server's limit and complete (as uvicorn hands it over), of the plain shape (``/create``:
``{"split", "index"}``; ``/call``: ``{"name", "input"}``). Anything else (a missing or unknown session, ``HEAD``, a
named environment, a body declared too large, ``task_spec``, a resumed call's ``task_id``, a body that is not
JSON) goes to the router, body included, which answers it, errors included.
``tests/unit/test_ors_fast_routes.py`` checks that every answer made here is the router's, byte for byte.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pydantic_core

from ngym.errors import ConfigError
from ngym.server.fronts.ors import sse
from ngym.server.fronts.ors.episodes import FrontError
from ngym.server.fronts.ors.routes import refusal
from ngym.server.pipeline.intake import parse_json
from ngym.server.pipeline.request_limits import BODY_BYTES_KEY

if TYPE_CHECKING:
    from ngym.server.fronts.ors.episodes import Episode
    from ngym.server.fronts.ors.routes import ORSFront

Send = Callable[[Any], Awaitable[None]]
Receive = Callable[[], Awaitable[Any]]
#: What a handler gives back: None when it answered, else the ``receive`` the router reads the body from.
Outcome = Receive | None

_JSON_TYPE = (b"content-type", b"application/json")
_SSE_HEADERS = [(k.encode(), v.encode()) for k, v in sse.HEADERS.items()]
_SSE_TYPE = (b"content-type", f"{sse.MEDIA_TYPE}; charset=utf-8".encode())
_PING_OK = b'{"status":"ok"}'
_SESSION_HEADER = b"x-session-id"
_CREATE_KEYS = frozenset({"split", "index"})
_CALL_KEYS = frozenset({"name", "input"})


def _length(body: bytes) -> tuple[bytes, bytes]:
    return (b"content-length", b"%d" % len(body))


async def _json(send: Send, body: bytes) -> None:
    """A 200 with a JSON body, the headers Starlette's ``Response(body, media_type="application/json")`` sends."""
    await send({"type": "http.response.start", "status": 200, "headers": [_length(body), _JSON_TYPE]})
    await send({"type": "http.response.body", "body": body})


class _Plain:
    """What one header pass finds: the ``X-Session-ID`` (stripped; None when missing or blank), and whether the
    body is within ``max_body`` (as the request limits would let it through)."""

    __slots__ = ("ok", "sid", "whole")

    def __init__(self, scope: Any, max_body: int) -> None:
        self.sid: str | None = None
        buffered = scope.get(BODY_BYTES_KEY)
        #: the body came whole with the headers, within the limit: one ``receive`` holds all of it
        self.whole = self.ok = buffered is not None and buffered <= max_body
        seen_sid = seen_length = False
        for name, value in scope["headers"]:
            if name == _SESSION_HEADER and not seen_sid:
                seen_sid = True
                self.sid = value.decode("latin-1").strip() or None
            elif name == b"content-length" and not seen_length:
                seen_length = True
                if not self.ok:
                    self.ok = value.isdigit() and int(value) <= max_body
        if not seen_length and buffered is None:
            self.ok = True  # no declared size: the request limits bound only what a route reads


class FastRoutes:
    """The plain cases of ``/create_session``, ``/ping``, ``/prompt``, ``/task_tools``, ``/tools``, ``/delete``
    and ``/delete_session`` of one front."""

    def __init__(self, front: ORSFront) -> None:
        self.front = front
        self.episodes = front.episodes
        self.max_body = front.episodes.server.config.max_request_body_bytes
        handlers: dict[tuple[str, str], Callable[[_Plain, Receive, Send], Awaitable[Outcome]]] = {
            ("POST", "/create_session"): self.create_session,
            ("POST", "/create"): self.create,
            ("POST", "/call"): self.call,
            ("POST", "/ping"): self.ping,
            ("GET", "/prompt"): self.prompt,
            ("GET", "/task_tools"): self.task_tools,
            ("GET", "/tools"): self.tools,
            ("POST", "/delete"): self.delete,
            ("POST", "/delete_session"): self.delete_session,
        }
        self.handlers = handlers
        opened = sse.finished_text("\0", "").encode()
        self._opened_head, self._opened_tail = opened.split(b"\0")

    async def __call__(self, route: str, scope: Any, receive: Receive, send: Send) -> Outcome:
        """Answer ``route`` (the path below the mount) when it is a plain case (None); else the ``receive`` the
        router must read the request's body from."""
        handler = self.handlers.get((scope["method"], route))
        if handler is None:
            return receive
        plain = _Plain(scope, self.max_body)
        return await handler(plain, receive, send) if plain.ok else receive

    def _episode(self, plain: _Plain) -> Episode | None:
        return self.episodes.find(plain.sid) if plain.sid is not None else None

    async def _object(self, plain: _Plain, receive: Receive, keys: frozenset[str]) -> tuple[Any, Receive]:
        """The body as a JSON object with exactly ``keys`` (None when it is not one), and the ``receive`` that
        gives the router the same body."""
        if not plain.whole:
            return None, receive
        message = await receive()
        body = message.get("body", b"") if message["type"] == "http.request" else b""
        again_given = False

        async def again() -> Any:
            nonlocal again_given
            if not again_given:
                again_given = True
                return message
            return await receive()

        if message["type"] != "http.request" or message.get("more_body") or not body:
            return None, again
        try:
            data = parse_json(body)
        except ValueError:
            return None, again
        return (data if type(data) is dict and data.keys() == keys else None), again

    async def create_session(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        body = self._opened_head + self.front.slot.new_id().encode() + self._opened_tail
        headers = [*_SSE_HEADERS, _length(body), _SSE_TYPE]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return None

    async def create(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        if plain.sid is None:
            return receive
        data, receive = await self._object(plain, receive, _CREATE_KEYS)
        if data is None or type(data["split"]) is not str or type(data["index"]) is not int:
            return receive
        try:
            await self.front.open_episode(plain.sid, data["split"], data["index"])
        except (FrontError, ConfigError) as exc:  # as the router answers them
            refused = refusal(exc)
            assert refused is not None
            await send({"type": "http.response.start", "status": refused.status_code, "headers": refused.raw_headers})
            await send({"type": "http.response.body", "body": bytes(refused.body)})
            return None
        await _json(send, pydantic_core.to_json({"sid": plain.sid}))
        return None

    async def call(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        episode = self._episode(plain)
        if episode is None:
            return receive
        data, receive = await self._object(plain, receive, _CALL_KEYS)
        if data is None or type(data["name"]) is not str or type(data["input"]) is not dict:
            return receive
        task_id = os.urandom(16).hex()
        result: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.front.keep_result(episode, task_id, result)
        await sse.answer_inline(task_id, self.front.call_text(episode, data["name"], data["input"]), result, send)
        return None

    async def ping(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        if self._episode(plain) is None:
            return receive
        await _json(send, _PING_OK)
        return None

    async def prompt(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        episode = self._episode(plain)
        if episode is None or episode.observation:
            return receive
        await _json(send, episode.facts.prompt)
        return None

    async def task_tools(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        episode = self._episode(plain)
        if episode is None:
            return receive
        await _json(send, episode.facts.listing)
        return None

    async def tools(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        await _json(send, self.front.listing)
        return None

    async def delete(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        if plain.sid is None:
            return receive
        await self.episodes.delete(plain.sid)
        await _json(send, pydantic_core.to_json({"sid": plain.sid}))
        return None

    async def delete_session(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        if plain.sid is None:
            return receive
        await _json(send, pydantic_core.to_json({"sid": plain.sid}))
        return None
