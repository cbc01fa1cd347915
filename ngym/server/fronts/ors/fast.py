"""The ORS requests that run no environment code, answered as plain ASGI from bytes made in advance.

A training client's rollout (``openreward``'s session, as TRL's ``OpenRewardSpec`` drives it) is ``/create_session``,
``/create``, a first ``/ping``, ``/prompt``, one ``/call`` per tool call, the final answer's ``/call``, ``/delete``
and ``/delete_session``. Only ``/create`` (the seed) and the ``/call``\\ s run the environment; the other five read
or drop an entry of the episode table. They are answered here, before the front's router: no request object, no
route table, no response object; the answer's bytes (a session's prompt and tool listing are kept per row, see
``rows.RowFacts``) and its header list are ready-made, so such a request costs the HTTP server's own work and a
dictionary lookup.

Only the plain case is answered here: the bare route (``/ping``, not ``/<env_name>/ping``), its method, an
``X-Session-ID`` naming a live episode where one is needed, a row without a Gymnasium observation for the prompt,
a body within the server's limit (none of these routes reads it). Anything else (a missing or unknown session,
``HEAD``, a named environment, a body declared too large) goes to the router, which answers it, errors included.
``tests/unit/test_ors_fast_routes.py`` checks that every answer made here is the router's, byte for byte.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pydantic_core

from ngym.server.fronts.ors import sse
from ngym.server.pipeline.request_limits import BODY_BYTES_KEY

if TYPE_CHECKING:
    from ngym.server.fronts.ors.episodes import Episode
    from ngym.server.fronts.ors.routes import ORSFront

Send = Callable[[Any], Awaitable[None]]

_JSON_TYPE = (b"content-type", b"application/json")
_SSE_HEADERS = [(k.encode(), v.encode()) for k, v in sse.HEADERS.items()]
_SSE_TYPE = (b"content-type", f"{sse.MEDIA_TYPE}; charset=utf-8".encode())
_PING_OK = b'{"status":"ok"}'
_SESSION_HEADER = b"x-session-id"


def _length(body: bytes) -> tuple[bytes, bytes]:
    return (b"content-length", b"%d" % len(body))


async def _json(send: Send, body: bytes) -> None:
    """A 200 with a JSON body, the headers Starlette's ``Response(body, media_type="application/json")`` sends."""
    await send({"type": "http.response.start", "status": 200, "headers": [_length(body), _JSON_TYPE]})
    await send({"type": "http.response.body", "body": body})


class _Plain:
    """What one header pass finds: the ``X-Session-ID`` (stripped; None when missing or blank), and whether the
    body is within ``max_body`` (as the request limits would let it through)."""

    __slots__ = ("ok", "sid")

    def __init__(self, scope: Any, max_body: int) -> None:
        self.sid: str | None = None
        buffered = scope.get(BODY_BYTES_KEY)
        self.ok = buffered is not None and buffered <= max_body
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
        handlers: dict[tuple[str, str], Callable[[_Plain, Send], Awaitable[bool]]] = {
            ("POST", "/create_session"): self.create_session,
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

    async def __call__(self, route: str, scope: Any, send: Send) -> bool:
        """Answer ``route`` (the path below the mount) when it is a plain case; False when the router must."""
        handler = self.handlers.get((scope["method"], route))
        if handler is None:
            return False
        plain = _Plain(scope, self.max_body)
        return plain.ok and await handler(plain, send)

    def _episode(self, plain: _Plain) -> Episode | None:
        return self.episodes.find(plain.sid) if plain.sid is not None else None

    async def create_session(self, plain: _Plain, send: Send) -> bool:
        body = self._opened_head + self.front.slot.new_id().encode() + self._opened_tail
        headers = [*_SSE_HEADERS, _length(body), _SSE_TYPE]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return True

    async def ping(self, plain: _Plain, send: Send) -> bool:
        if self._episode(plain) is None:
            return False
        await _json(send, _PING_OK)
        return True

    async def prompt(self, plain: _Plain, send: Send) -> bool:
        episode = self._episode(plain)
        if episode is None or episode.observation:
            return False
        await _json(send, episode.facts.prompt)
        return True

    async def task_tools(self, plain: _Plain, send: Send) -> bool:
        episode = self._episode(plain)
        if episode is None:
            return False
        await _json(send, episode.facts.listing)
        return True

    async def tools(self, plain: _Plain, send: Send) -> bool:
        await _json(send, self.front.listing)
        return True

    async def delete(self, plain: _Plain, send: Send) -> bool:
        if plain.sid is None:
            return False
        await self.episodes.delete(plain.sid)
        await _json(send, pydantic_core.to_json({"sid": plain.sid}))
        return True

    async def delete_session(self, plain: _Plain, send: Send) -> bool:
        if plain.sid is None:
            return False
        await _json(send, pydantic_core.to_json({"sid": plain.sid}))
        return True
