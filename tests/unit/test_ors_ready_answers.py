"""The ORS requests that run no environment code, answered from the HTTP parser's callbacks
(``FastRoutes.ready``), are byte for byte what the same request gets through the app (ASGI), on one connection of
uvicorn's own protocol serving the whole app; the cases they leave to the app (an unknown session, ``/delete`` of
a session still open) are answered by the app."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from ngym.server.pipeline import http_protocol
from ngym.server.pipeline.ready_answers import ReadyAnswers, ready_answers
from ngym.testing import app_for
from ngym.testing.memory_transport import MemoryTransport

pytestmark = pytest.mark.skipif(http_protocol.GuardedHttpToolsProtocol is None, reason="httptools not installed")

SDK = b"user-agent: openreward-sdk/0.1.167\r\naccept: */*\r\naccept-encoding: gzip, deflate\r\nx-api-key: \r\n"
NO_BODY = b"content-type: application/octet-stream\r\ncontent-length: 0\r\n"


class Connection:
    """One keep-alive connection of ngym's httptools protocol to the app; counts the ready answers given."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(
            app, http=http_protocol.GuardedHttpToolsProtocol, lifespan="off", log_level="warning", access_log=False
        )
        http_protocol.configure(config, header_timeout=30, max_header_bytes=65536)
        config.load()
        state = ServerState()
        state.default_headers = [(b"date", b"Sun, 29 Nov 2026 10:00:00 GMT"), (b"server", b"uvicorn")]
        self.protocol = config.http_protocol_class(
            config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
        )
        self.transport = MemoryTransport()
        self.protocol.connection_made(self.transport)
        self.ready: ReadyAnswers = ready_answers(app)
        self.answered = 0
        self.routed = 0  #: requests ``app_for`` gave an app of the front's own
        self.direct = 0  #: requests ``direct`` gave a runner for, and runs its runner took
        self.declined = 0  #: runs its runner declined (the app answered)

    def count(self, answer: Any) -> Any:
        def counted(method: bytes, url: bytes, headers: list[tuple[bytes, bytes]]) -> bytes | None:
            found: bytes | None = answer(method, url, headers)
            self.answered += found is not None
            return found

        return counted

    def count_routed(self, app_for: Any) -> Any:
        def counted(method: bytes, url: bytes, headers: list[tuple[bytes, bytes]], app: Any) -> Any:
            found = app_for(method, url, headers, app)
            self.routed += found is not None
            return found

        return counted

    def count_direct(self, direct: Any) -> Any:
        def counted(method: bytes, url: bytes, headers: list[tuple[bytes, bytes]]) -> Any:
            runner = direct(method, url, headers)
            if runner is None:
                return None

            def run(body: bytes, reply: Any) -> Any:
                work = runner(body, reply)
                self.direct += work is not None
                self.declined += work is None
                return work

            return run

        return counted

    async def send(
        self, method: str, path: str, headers: bytes = b"", body: bytes = b"", *, ready: bool = True
    ) -> bytes:
        """The whole answer to one request (by a ready answer when the front has one and ``ready``; by the front's
        own app when it routes the request and ``ready``)."""
        front, routes, direct = self.ready.answer, self.ready.app_for, self.ready.direct
        if front is not None:
            self.ready.answer = self.count(front) if ready else None
        if routes is not None:
            self.ready.app_for = self.count_routed(routes) if ready else None
        if direct is not None:
            self.ready.direct = self.count_direct(direct) if ready else None
        try:
            self.transport.written.clear()
            length = b"content-length: %d\r\n" % len(body) if body else b""
            self.protocol.data_received(
                b"%s %s HTTP/1.1\r\nhost: t\r\n%s%s\r\n%s" % (method.encode(), path.encode(), headers, length, body)
            )
            loop = asyncio.get_running_loop()
            give_up = loop.time() + 10
            while not _complete(bytes(self.transport.written)):
                assert loop.time() < give_up, bytes(self.transport.written)
                await asyncio.sleep(0.002)
            return bytes(self.transport.written)
        finally:
            if front is not None:  # (else the front was built by this request, and its answerer stays)
                self.ready.answer = front
            if routes is not None:
                self.ready.app_for = routes
            if direct is not None:
                self.ready.direct = direct


def _complete(answer: bytes) -> bool:
    head, blank, body = answer.partition(b"\r\n\r\n")
    found = re.search(rb"content-length: (\d+)", head)
    return bool(blank and found and len(body) >= int(found.group(1)))


@pytest.fixture
async def connection() -> AsyncIterator[Connection]:
    app = app_for("example_single_tool_call")
    async with app.router.lifespan_context(app):
        yield Connection(app)


async def _open(connection: Connection) -> str:
    opened = await connection.send("POST", "/ors/create_session", SDK + b"accept: text/event-stream\r\n", b"{}")
    sid = re.search(rb"data: ([0-9a-f]{32})\r\n", opened)
    assert sid is not None
    own = b"x-session-id: " + sid.group(1) + b"\r\ncontent-type: application/json\r\n"
    assert (await connection.send("POST", "/create", SDK + own, b'{"split": "example", "index": 0}')).startswith(
        b"HTTP/1.1 200 OK\r\n"
    )
    return sid.group(1).decode()


async def test_ready_answers_are_the_apps_byte_for_byte(connection: Connection) -> None:
    assert connection.ready.answer is None  # the front is built on its first request
    sid = await _open(connection)
    assert connection.ready.answer is not None and connection.answered == 0
    own = SDK + b"x-session-id: %s\r\n" % sid.encode()
    requests = [
        ("POST", "/ors//ping", own + NO_BODY),
        ("POST", "/ping", own + NO_BODY),
        ("GET", "/prompt", own),
        ("GET", "/ors/prompt", own),
        ("GET", "/ors/task_tools", own),
        ("GET", "/ors/tools", own),
        ("POST", "/delete_session", own + NO_BODY),
    ]
    for method, path, headers in requests:
        answered = connection.answered
        fast = await connection.send(method, path, headers)
        assert connection.answered == answered + 1, path
        assert fast == await connection.send(method, path, headers, ready=False), path
        assert fast.startswith(b"HTTP/1.1 200 OK\r\ndate: Sun, 29 Nov 2026 10:00:00 GMT\r\nserver: uvicorn\r\n")
    stream = SDK + b"accept: text/event-stream\r\n"
    fast = await connection.send("POST", "/create_session", stream + b"content-type: application/json\r\n", b"{}")
    slow = await connection.send(
        "POST", "/create_session", stream + b"content-type: application/json\r\n", b"{}", ready=False
    )
    assert connection.answered == len(requests) + 1
    assert re.sub(rb"[0-9a-f]{32}", b"ID", fast) == re.sub(rb"[0-9a-f]{32}", b"ID", slow) and fast != slow


async def test_what_ready_answers_leave_to_the_app(connection: Connection) -> None:
    sid = await _open(connection)
    own = SDK + b"x-session-id: %s\r\n" % sid.encode()
    unknown = SDK + b"x-session-id: %s\r\n" % (b"0" * 32)
    for method, path, headers in [("POST", "/ping", unknown + NO_BODY), ("GET", "/prompt", unknown)]:
        assert (await connection.send(method, path, headers)).startswith(b"HTTP/1.1 404 ")
    assert (await connection.send("POST", "/tools", own + NO_BODY)).startswith(b"HTTP/1.1 405 ")  # GET only
    assert connection.answered == 0
    deleted = await connection.send("POST", "/delete", own + NO_BODY)  # still open: the app closes its session
    assert deleted.endswith(b'{"sid":"%s"}' % sid.encode()) and connection.answered == 0
    assert (await connection.send("POST", "/ping", own + NO_BODY)).startswith(b"HTTP/1.1 404 ")
    again = await connection.send("POST", "/delete", own + NO_BODY)  # unknown now: nothing to close
    assert connection.answered == 1 and again == await connection.send("POST", "/delete", own + NO_BODY, ready=False)


def _ids_out(answer: bytes) -> bytes:
    return re.sub(rb"[0-9a-f]{32}", b"ID", answer)


async def test_environment_requests_run_from_the_parser_and_answer_as_the_whole_app(
    connection: Connection,
) -> None:
    """``/create`` and ``/call`` run the front's handler from the parser's callbacks (``direct``), without a request
    cycle; their answers are the whole app's, byte for byte (task ids aside); a case the handler does not take (a
    body that is not JSON, an unknown session) is the whole app's own answer; NeMo Gym's wire (no ORS header) is
    never taken there; a body over ``READY_MAX_BODY`` runs the front's own app in uvicorn's cycle (``app_for``)."""
    sid = await _open(connection)
    assert connection.direct == 1 and connection.routed == 0  # the first /create built the front; this one direct
    own = SDK + b"x-session-id: %s\r\ncontent-type: application/json\r\n" % sid.encode()
    call = b'{"name": "get_weather", "input": {"city": "Paris"}}'
    fast = await connection.send("POST", "/call", own + b"accept: text/event-stream\r\n", call)
    assert connection.direct == 2 and b"event: end" in fast
    slow = await connection.send("POST", "/ors/call", own + b"accept: text/event-stream\r\n", call, ready=False)
    assert connection.direct == 2 and _ids_out(fast) == _ids_out(slow)
    for body in (b"{not json", b'{"name": "get_weather"}', b"[]", b""):
        refused = await connection.send("POST", "/call", own, body)
        assert refused.startswith(b"HTTP/1.1 422 ") and refused == await connection.send(
            "POST", "/call", own, body, ready=False
        )
    assert connection.direct == 2 and connection.declined == 4
    unknown = SDK + b"x-session-id: %s\r\ncontent-type: application/json\r\n" % (b"0" * 32)
    missing = await connection.send("POST", "/call", unknown, call)
    assert missing.startswith(b"HTTP/1.1 404 ") and missing == await connection.send(
        "POST", "/call", unknown, call, ready=False
    )
    big = b'{"name": "get_weather", "input": {"city": "%s"}}' % (b"P" * 5000)
    routed = connection.routed
    fast = await connection.send("POST", "/call", own, big)
    assert connection.routed == routed + 1 and b"event: end" in fast
    assert _ids_out(fast) == _ids_out(await connection.send("POST", "/call", own, big, ready=False))
    direct, declined = connection.direct, connection.declined
    nemo = await connection.send("POST", "/get_weather", b"content-type: application/json\r\n", b'{"city": "Paris"}')
    assert nemo.startswith(b"HTTP/1.1 ") and (connection.direct, connection.declined) == (direct, declined)
    again = await connection.send("POST", "/create", own, b'{"split": "example", "index": 0}')
    assert again.startswith(b"HTTP/1.1 400 ") and b"already exists" in again and connection.direct == direct + 1
    assert again == await connection.send("POST", "/create", own, b'{"split": "example", "index": 0}', ready=False)
    deleted = await connection.send("POST", "/delete", own, b"{}")  # still open: closed, from the parser
    assert deleted.endswith(b'{"sid":"%s"}' % sid.encode()) and connection.direct == direct + 2


async def test_a_request_pipelined_behind_a_routed_one_is_answered_after_it(connection: Connection) -> None:
    """Two requests in one read: a ``/call`` the front's own app runs, then a ``/ping``; the ping waits for the call
    (as behind any request uvicorn runs) and the answers come in order."""
    sid = await _open(connection)
    own = SDK + b"x-session-id: %s\r\n" % sid.encode()
    call = b'{"name": "get_weather", "input": {"city": "Paris"}}'
    head = b"POST /call HTTP/1.1\r\nhost: t\r\n%scontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    ping = b"POST /ping HTTP/1.1\r\nhost: t\r\n%s%s\r\n" % (own, NO_BODY)
    connection.transport.written.clear()
    connection.protocol.data_received(head % (own, len(call)) + call + ping)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + 10
    while bytes(connection.transport.written).count(b"HTTP/1.1 200 OK") < 2:
        assert loop.time() < give_up, bytes(connection.transport.written)
        await asyncio.sleep(0.002)
    written = bytes(connection.transport.written)
    assert written.index(b"event: end") < written.rindex(b"HTTP/1.1 200 OK") and written.endswith(b'{"status":"ok"}')


async def test_a_long_call_run_from_the_parser_streams_and_what_is_pipelined_behind_it_waits(
    connection: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``/call`` still running after ``sse.PING_SECONDS`` streams (chunked: its ``task_id`` at once, pings, then
    the answer) and a ``/ping`` pipelined behind it is answered after it."""
    from ngym.server.fronts.ors import sse

    sid = await _open(connection)
    front = connection.ready.direct.__self__.front  # type: ignore[union-attr]
    release = asyncio.Event()
    run = front.call_json

    async def slow(*args: Any) -> bytes:
        await release.wait()
        answer: bytes = await run(*args)
        return answer

    monkeypatch.setattr(front, "call_json", slow)
    monkeypatch.setattr(sse, "PING_SECONDS", 0.01)
    own = SDK + b"x-session-id: %s\r\n" % sid.encode()
    call = b'{"name": "get_weather", "input": {"city": "Paris"}}'
    head = b"POST /call HTTP/1.1\r\nhost: t\r\n%scontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    ping = b"POST /ping HTTP/1.1\r\nhost: t\r\n%s%s\r\n" % (own, NO_BODY)
    connection.transport.written.clear()
    direct = connection.direct
    connection.ready.direct = connection.count_direct(connection.ready.direct)
    connection.protocol.data_received(head % (own, len(call)) + call + ping)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + 10
    while b": ping" not in connection.transport.written:
        assert loop.time() < give_up, bytes(connection.transport.written)
        await asyncio.sleep(0.002)
    started = bytes(connection.transport.written)
    assert connection.direct == direct + 1 and b"transfer-encoding: chunked\r\n" in started
    assert b"event: task_id\r\n" in started and b'{"status":"ok"}' not in started
    release.set()
    while not connection.transport.written.endswith(b'{"status":"ok"}'):
        assert loop.time() < give_up, bytes(connection.transport.written)
        await asyncio.sleep(0.002)
    written = bytes(connection.transport.written)
    assert written.index(b"event: end") < written.index(b"0\r\n\r\n") < written.rindex(b"HTTP/1.1 200 OK")


async def test_an_exception_in_the_fronts_handler_run_from_the_parser_is_a_500_naming_it(
    connection: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The front's own code raising on a request run from the parser: 500 with ``repr(exc)`` (as ngym's middleware
    answers), and the connection serves the next request."""
    sid = await _open(connection)
    front = connection.ready.direct.__self__.front  # type: ignore[union-attr]

    async def broken(*args: Any) -> None:
        raise RuntimeError("the front broke")

    monkeypatch.setattr(front, "open_episode", broken)
    other = SDK + b"x-session-id: %s\r\ncontent-type: application/json\r\n" % (b"1" * 32)
    answer = await connection.send("POST", "/create", other, b'{"split": "example", "index": 0}')
    assert answer.startswith(b"HTTP/1.1 500 ") and answer.endswith(b"\"RuntimeError('the front broke')\"")
    own = SDK + b"x-session-id: %s\r\n" % sid.encode()
    assert (await connection.send("POST", "/ping", own + NO_BODY)).endswith(b'{"status":"ok"}')
