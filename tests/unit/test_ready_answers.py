"""Requests answered from the HTTP parser's callbacks (``ngym.server.pipeline.ready_answers``, httptools): the
answer written without the app, in order with the requests around it on the connection, and every request the
protocol must not answer that way (or that the answerer declines) left to the app; the header deadline still
applies around them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from ngym.server.pipeline import http_protocol
from ngym.server.pipeline.ready_answers import READY_MAX_BODY, ready_answers
from ngym.testing.memory_transport import MemoryTransport

pytestmark = pytest.mark.skipif(http_protocol.GuardedHttpToolsProtocol is None, reason="httptools not installed")

READY = b"content-length: 2\r\ncontent-type: application/json\r\n\r\n{}"


class App:
    """An ASGI app that answers ``/slow`` when ``release`` is set and everything else at once with 204, noting
    each path it served; its ``ReadyAnswers`` answer ``/r`` (and count what they were asked)."""

    def __init__(self) -> None:
        self.state = SimpleNamespace()
        self.served: list[str] = []
        self.asked: list[bytes] = []
        self.release = asyncio.Event()
        ready_answers(self).answer = self.ready

    def ready(self, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]]) -> bytes | None:
        self.asked.append(url)
        return READY if url == b"/r" else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/slow":
            await self.release.wait()
        self.served.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _connection(app: Any, *, header_timeout: float = 30, access_log: bool = False) -> tuple[Any, MemoryTransport]:
    config = uvicorn.Config(
        app, http=http_protocol.GuardedHttpToolsProtocol, lifespan="off", log_level="warning", access_log=access_log
    )
    http_protocol.configure(config, header_timeout=header_timeout, max_header_bytes=65536)
    config.load()  # wraps the app (proxy headers): the protocol finds the ReadyAnswers beneath
    state = ServerState()
    state.default_headers = [(b"server", b"uvicorn")]
    protocol = config.http_protocol_class(
        config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = MemoryTransport()
    protocol.connection_made(transport)
    return protocol, transport


def _request(path: str, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    return b"POST %s HTTP/%s\r\nhost: t\r\n%s\r\n" % (path.encode(), version, extra)


async def _until(condition: Any, seconds: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + seconds
    while not condition():
        if loop.time() > give_up:
            raise AssertionError("not reached")
        await asyncio.sleep(0.005)


ANSWER = b"HTTP/1.1 200 OK\r\nserver: uvicorn\r\n" + READY
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nserver: uvicorn\r\n\r\n"


async def test_a_ready_answer_is_written_at_once_without_the_app() -> None:
    app = App()
    protocol, transport = _connection(app)
    protocol.data_received(_request("/r"))
    assert bytes(transport.written) == ANSWER  # in the same call: no task, no app
    assert app.served == [] and protocol.server_state.total_requests == 1
    protocol.data_received(_request("/x"))
    await _until(lambda: app.served == ["/x"])
    protocol.data_received(_request("/r", b"content-length: 2\r\n") + b"{}")
    assert bytes(transport.written) == ANSWER + NO_CONTENT + ANSWER
    assert not transport.closed


async def test_a_ready_request_waits_for_one_in_progress_and_for_its_own_body() -> None:
    app = App()
    protocol, transport = _connection(app)
    protocol.data_received(_request("/slow") + _request("/r"))  # pipelined behind a request still running
    await asyncio.sleep(0.05)
    assert transport.written == b""
    app.release.set()
    await _until(lambda: transport.written.count(b"HTTP/1.1") == 2)
    assert bytes(transport.written) == NO_CONTENT * 2 and app.served == ["/slow", "/r"]  # the app answered it
    transport.written.clear()
    protocol.data_received(_request("/r", b"content-length: 5\r\n") + b"ab")
    assert transport.written == b""  # its body is not all here
    protocol.data_received(b"cde")
    assert bytes(transport.written) == ANSWER


@pytest.mark.parametrize(
    "request_bytes",
    [
        _request("/r", version=b"1.0"),
        _request("/r", b"connection: close\r\n"),
        _request("/r", b"expect: 100-continue\r\ncontent-length: 2\r\n") + b"{}",
        _request("/r", b"transfer-encoding: chunked\r\n") + b"2\r\n{}\r\n0\r\n\r\n",
        _request("/r", b"content-length: %d\r\n" % (READY_MAX_BODY + 1)) + b"x" * (READY_MAX_BODY + 1),
    ],
    ids=["http-1.0", "connection-close", "expect-100", "chunked", "large-body"],
)
async def test_requests_the_protocol_must_not_answer_early_go_to_the_app(request_bytes: bytes) -> None:
    app = App()
    protocol, transport = _connection(app)
    protocol.data_received(request_bytes)
    await _until(lambda: app.served == ["/r"])
    assert app.asked == []


async def test_without_an_answerer_or_with_the_access_log_every_request_goes_to_the_app() -> None:
    app = App()
    protocol, _ = _connection(app, access_log=True)  # the access log is written by the request cycle
    protocol.data_received(_request("/r"))
    await _until(lambda: app.served == ["/r"])
    ready_answers(app).answer = None
    protocol, _ = _connection(app)
    protocol.data_received(_request("/r"))
    await _until(lambda: app.served == ["/r", "/r"])
    assert app.asked == []


async def test_the_header_deadline_holds_around_ready_answers() -> None:
    app = App()
    protocol, transport = _connection(app, header_timeout=0.2)
    protocol.data_received(_request("/r"))
    assert bytes(transport.written) == ANSWER
    await _until(lambda: transport.closed)  # nothing more within the deadline after the answer: closed
    protocol, transport = _connection(app, header_timeout=0.2)
    protocol.data_received(_request("/r", b"content-length: 10\r\n") + b"ab")  # its body does not all come in time
    await _until(lambda: transport.closed)
    protocol.data_received(b"cdefghij")  # the rest, after the close: nothing is written to a closed connection
    assert transport.written == b""
