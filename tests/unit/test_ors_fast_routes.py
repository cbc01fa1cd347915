"""The ORS requests answered ahead of the front's router (``ngym.server.fronts.ors.fast``) answer exactly what the
router answers: the same status, headers and body, for the plain case and for every case the fast path leaves to
the router (a missing or unknown session, a named environment, ``HEAD``, a body declared too large)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ngym.server.fronts.ors.mount import ORSRequests, _relative
from ngym.server.pipeline.request_limits import BODY_BYTES_KEY
from ngym.testing import app_for

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


def _scope(method: str, path: str, headers: list[tuple[bytes, bytes]], body_bytes: int | None = 0) -> dict[str, Any]:
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"test"), (b"accept-encoding", b"gzip"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "state": {},
    }
    if body_bytes is not None:
        scope[BODY_BYTES_KEY] = body_bytes
    return scope


async def _call(app: Any, scope: dict[str, Any], body: bytes = b"") -> Answer:
    messages: list[Any] = []
    given = False

    async def receive() -> Any:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()

    async def send(message: Any) -> None:
        messages.append(message)

    await app(dict(scope), receive, send)
    start = next(m for m in messages if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], list(start.get("headers", [])), content


class Both:
    """The same request through the whole app (fast path first) and straight to the front's router."""

    def __init__(self, app: Any) -> None:
        self.app = app
        layer = app.middleware_stack
        while not isinstance(layer, ORSRequests):
            layer = layer.app
        self.lazy = layer.front
        self.router_app = self.lazy.router
        self.routed = 0  # requests that reached the router

        async def counted(scope: Any, receive: Any, send: Any) -> None:
            self.routed += 1
            await self.router_app(scope, receive, send)

        self.lazy._router = counted

    async def fast(self, scope: dict[str, Any], body: bytes = b"") -> Answer:
        return await _call(self.app, scope, body)

    async def router(self, scope: dict[str, Any], body: bytes = b"") -> Answer:
        route = "/" + scope["path"].removeprefix("/ors").lstrip("/")
        return await _call(self.router_app, _relative(scope, route), body)

    async def same(self, scope: dict[str, Any], body: bytes = b"", *, fast_path: bool = True) -> Answer:
        """The answer through the app (by the fast path, or by the router when ``fast_path`` is False), equal to
        the router's own."""
        routed = self.routed
        fast = await self.fast(scope, body)
        assert self.routed == routed + (0 if fast_path else 1)
        assert fast == await self.router(scope, body)
        return fast

    async def open(self, index: int = 0) -> str:
        status, _, text = await self.fast(_scope("POST", "/ors/create_session", [(b"accept", b"text/event-stream")]))
        assert status == 200
        sid = text.decode().split("\r\n")[1].removeprefix("data: ")
        create = b'{"split": "example", "index": %d}' % index
        headers = [(b"x-session-id", sid.encode()), (b"content-type", b"application/json")]
        assert (await self.fast(_scope("POST", "/ors/create", headers, len(create)), create))[0] == 200
        return sid


@pytest.fixture
async def both() -> AsyncIterator[Both]:
    app = app_for("example_single_tool_call")
    async with app.router.lifespan_context(app):
        app.middleware_stack = app.build_middleware_stack()
        yield Both(app)


async def test_session_routes_answer_as_the_router_does(both: Both) -> None:
    sid = await both.open()
    own = [(b"x-session-id", sid.encode())]
    for path in ("/ors/prompt", "/ors/task_tools", "/ors/tools", "/prompt", "/tools"):
        status, _, body = await both.same(_scope("GET", path, own))
        assert status == 200 and body
    status, _, body = await both.same(_scope("POST", "/ors//ping", own))
    assert (status, body) == (200, b'{"status":"ok"}')
    assert (await both.same(_scope("POST", "/ors/delete_session", own)))[2] == b'{"sid":"%s"}' % sid.encode()


async def test_the_session_id_stream_has_the_routers_shape(both: Both) -> None:
    scope = _scope("POST", "/ors/create_session", [(b"accept", b"text/event-stream")])
    routed = both.routed
    fast, slow = await both.fast(scope), await both.router(scope)
    assert both.routed == routed
    ids = [re.search(rb"data: ([0-9a-f]{32})\r\n", answer[2]) for answer in (fast, slow)]
    assert all(ids) and ids[0] != ids[1]  # type: ignore[union-attr]
    blank = [answer[2].replace(found.group(1), b"ID") for answer, found in zip((fast, slow), ids, strict=True)]  # type: ignore[union-attr]
    assert blank[0] == blank[1]
    assert fast[:2] == slow[:2]


async def test_delete_closes_the_session_as_the_router_does(both: Both) -> None:
    for path in ("/ors/delete", "/delete"):
        answers = []
        for way in (both.fast, both.router):
            sid = await both.open()
            own = [(b"x-session-id", sid.encode())]
            routed = both.routed
            answers.append((await way(_scope("POST", path, own)))[:2])
            assert both.routed == routed
            assert sid not in both.lazy.fast.episodes._live
            assert (await both.fast(_scope("POST", "/ors/ping", own)))[0] == 404  # gone either way
        assert answers[0] == answers[1]
    health = await _call(both.app, _scope("GET", "/health", []))
    assert b'"live_sessions":0' in health[2]


async def test_what_the_fast_path_leaves_to_the_router_is_answered_alike(both: Both) -> None:
    sid = await both.open()
    own = [(b"x-session-id", sid.encode())]
    unknown = [(b"x-session-id", b"not-a-session")]
    cases = [
        _scope("POST", "/ors/ping", []),  # no session id: 400
        _scope("POST", "/ors/ping", [(b"x-session-id", b"  ")]),
        _scope("POST", "/ors/ping", unknown),  # 404
        _scope("GET", "/ors/prompt", unknown),
        _scope("GET", "/ors/task_tools", []),
        _scope("POST", "/ors/delete", []),
        _scope("POST", "/ors/delete_session", []),
        _scope("GET", "/ors/ping", own),  # 405
        _scope("HEAD", "/ors/prompt", own),
        _scope("GET", "/ors/example_single_tool_call/prompt", own),  # named: the router's
        _scope("GET", "/ors/other_env/prompt", own),  # 404 unknown environment
        _scope("POST", "/ors/ping", [*own, (b"content-length", b"999999999999")], None),  # 413 before anything
    ]
    statuses = [(await both.same(scope, fast_path=False))[0] for scope in cases]
    assert statuses == [400, 400, 404, 404, 400, 400, 400, 405, 200, 200, 404, 413]
