"""The ORS requests answered ahead of the front's router (``ngym.server.fronts.ors.fast``) answer exactly what the
router answers: the same status, headers and body, for the plain case and for every case the fast path leaves to
the router (a missing or unknown session, a named environment, ``HEAD``, a body declared too large)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ngym.examples import EXAMPLE_ROWS, dataset_row, read_example_rollouts, read_jsonl, recorded_tool_calls
from ngym.server.fronts.ors.mount import ORSRequests, _relative
from ngym.server.pipeline.request_limits import BODY_BYTES_KEY
from ngym.targets import resolve
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


def _without_ids(answer: Answer, *ids: str) -> Answer:
    """An answer with the session and task ids it names blanked (they differ between two runs of one rollout)."""
    status, headers, body = answer
    body = re.sub(rb"event: task_id\r\ndata: [0-9a-f]{32}\r\n", b"event: task_id\r\ndata: TASK\r\n", body)
    for own in ids:
        body = body.replace(own.encode(), b"SID")
    headers = [(k, b"N" if k == b"content-length" else v) for k, v in headers]
    return status, headers, body


async def test_a_rollouts_create_and_calls_answer_as_the_routers(both: Both) -> None:
    """/create and /call (the tool calls and the final answer) of one recorded rollout, run twice on the same row:
    through the app (the fast path) and straight to the router; every answer the same, the reward the recording's."""
    folder = resolve("example_single_tool_call").folder
    assert folder is not None
    rows = read_jsonl(folder / "data" / EXAMPLE_ROWS)
    recorded = next(r for r in read_example_rollouts(folder / "data" / "example_rollouts.jsonl") if r["reward"])
    index = rows.index(dataset_row(recorded))
    calls = [{"name": c.name, "input": c.arguments} for c in recorded_tool_calls(recorded["response"])]
    message = next(i for i in recorded["response"]["output"] if i.get("type") == "message")
    calls.append({"name": "submit_answer", "input": {"answer": message["content"][0]["text"]}})
    runs = []
    for way, expected_routed in ((both.fast, 0), (both.router, 0)):
        status, _, text = await both.fast(_scope("POST", "/ors/create_session", [(b"accept", b"text/event-stream")]))
        sid = text.decode().split("\r\n")[1].removeprefix("data: ")
        own = [(b"x-session-id", sid.encode()), (b"content-type", b"application/json")]
        routed = both.routed
        create = b'{"split": "example", "index": %d}' % index
        answers = [await way(_scope("POST", "/ors/create", own, len(create)), create)]
        for call in calls:
            body = json.dumps(call).encode()
            answers.append(await way(_scope("POST", "/ors/call", own, len(body)), body))
        assert both.routed == routed + expected_routed  # the router's own runs are called directly
        runs.append([_without_ids(answer, sid) for answer in answers])
    assert runs[0] == runs[1]
    final = json.loads(runs[0][-1][2].decode().split("event: end\r\ndata: ")[1].split("\r\n")[0])
    assert final["output"]["reward"] == recorded["reward"] and final["output"]["finished"] is True


async def test_what_the_fast_path_leaves_of_create_and_call_is_the_routers(both: Both) -> None:
    sid = await both.open()
    own = [(b"x-session-id", sid.encode()), (b"content-type", b"application/json")]
    cases = [  # (body, status, answered by the fast path); each run on a fresh session id per way
        (b'{"split": "nope", "index": 0}', 400, True),  # refused by the front: answered alike
        (b'{"split": "example", "index": 99}', 400, True),
        (b'{"split": "example", "index": "0"}', 200, False),  # the body model's own reading
        (b'{"split": "example", "index": 0, "toolset_name": "x"}', 400, False),
        (b"not json", 422, False),
        (b"", 422, False),
    ]
    for number, (body, status, fast) in enumerate(cases):
        answers = []
        for way, ours in ((both.fast, fast), (both.router, False)):
            fresh = f"{number:02d}{'f' if way == both.fast else 'r'}".ljust(32, "0")
            routed = both.routed
            scope = _scope("POST", "/ors/create", [(b"x-session-id", fresh.encode())], len(body))
            answers.append(_without_ids(await way(scope, body), fresh))
            assert both.routed == routed + (0 if ours or way == both.router else 1), body
        assert answers[0] == answers[1] and answers[0][0] == status, (body, answers)
    duplicate = b'{"split": "example", "index": 0}'  # the session exists already
    assert (await both.same(_scope("POST", "/ors/create", own, len(duplicate)), duplicate))[0] == 400
    unread = _scope("POST", "/ors/create", [(b"x-session-id", b"u" * 32)], None)  # a body not handed over whole
    assert (await both.same(unread, b'{"split": "nope", "index": 0}', fast_path=False))[0] == 400
    call_cases = [
        (own, b'{"name": "get_weather", "input": {"city": 3}}', 200, True),  # the tool's own 422, as its output
        (own, b'{"name": "nope", "input": {}}', 200, True),
        (own, b'{"name": "get_weather", "input": []}', 422, False),
        (own, b'{"name": "get_weather", "input": {}, "task_id": "t"}', 200, False),  # resuming: unknown task_id
        (own, b"[1]", 422, False),
        ([(b"x-session-id", b"gone")], b'{"name": "get_weather", "input": {}}', 404, False),
    ]
    for headers, body, status, fast in call_cases:
        routed = both.routed
        answer = await both.fast(_scope("POST", "/ors/call", headers, len(body)), body)
        assert both.routed == routed + (0 if fast else 1)
        slow = await both.router(_scope("POST", "/ors/call", headers, len(body)), body)
        assert _without_ids(answer) == _without_ids(slow) and answer[0] == status, body


async def test_a_call_still_running_after_the_ping_interval_streams_as_the_router_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call not done within PING_SECONDS: the stream starts (task id, then a ping per interval) and ends with the
    answer, as ``sse.respond`` streams it; the result is kept for a client resuming by task id."""
    from ngym.server.fronts.ors import sse

    monkeypatch.setattr(sse, "PING_SECONDS", 0.01)
    loop = asyncio.get_running_loop()
    work: asyncio.Future[str] = loop.create_future()
    result: asyncio.Future[str] = loop.create_future()
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    answering = asyncio.ensure_future(sse.answer_inline("t1", work, result, send))
    for _ in range(10_000):  # until the stream has started and pinged once (each turn of the loop lets it run)
        if any(m.get("body") == b": ping\r\n\r\n" for m in sent):
            break
        await asyncio.sleep(0.001)
    assert sent[0]["type"] == "http.response.start" and (b"content-length" not in dict(sent[0]["headers"]))
    assert sent[1] == {"type": "http.response.body", "body": sse.event("task_id", "t1").encode(), "more_body": True}
    assert not answering.done()
    work.set_result('{"ok": true}')
    await answering
    end = sse.event("end", '{"ok": true}').encode()
    assert sent[-1] == {"type": "http.response.body", "body": end, "more_body": False}
    assert result.result() == '{"ok": true}'
    streamed = await sse.respond("t1", result)  # the router's answer to a resumed call
    assert streamed.body.decode() == sse.event("task_id", "t1") + sse.event("end", '{"ok": true}')
