"""Requests an app runs from the HTTP parser's callbacks (``ReadyAnswers.direct``,
``ngym.server.pipeline.direct_answers``), on ngym's httptools protocols in process: the answer is one write; a
handler that waits keeps the connection's requests in order (a pipelined request is answered after it) and can
stream; a handler that raises or never answers is a 500 and the connection serves on; a request the runner declines
is the app's, body included; a graceful shutdown lets the running request finish, then closes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from uvicorn.server import ServerState

from ngym.server.pipeline import http_protocol
from ngym.server.pipeline.ready_answers import ready_answers
from ngym.testing.memory_transport import MemoryTransport

PROTOCOLS = [cls for cls in (http_protocol.GuardedHttpToolsProtocol, http_protocol.ProxiedHttpToolsProtocol) if cls]
pytestmark = pytest.mark.skipif(not PROTOCOLS, reason="httptools not installed")


class Handlers:
    """The direct runners of the test app: ``/now`` answers at once, ``/wait`` when ``release`` is set (streamed
    when ``stream``), ``/raise`` raises, ``/silent`` returns without answering, ``/decline`` is left to the app."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.stream = False
        self.ran: list[bytes] = []

    def direct(self, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]]) -> Any:
        if method != b"POST" or url not in (b"/now", b"/wait", b"/raise", b"/silent", b"/decline"):
            return None
        return lambda body, send: self.run(url, body, send)

    def run(self, url: bytes, body: bytes, send: Any) -> Any:
        if url == b"/decline":
            return None
        self.ran.append(url)
        return self.answer(url, body, send)

    async def answer(self, url: bytes, body: bytes, send: Any) -> None:
        if url == b"/raise":
            raise ValueError("the handler broke")
        if url == b"/silent":
            return
        headers = [(b"content-type", b"text/plain")]
        if url == b"/wait" and self.stream:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b"first ", "more_body": True})
            await self.release.wait()
            await send({"type": "http.response.body", "body": b"last", "more_body": False})
            return
        if url == b"/wait":
            await self.release.wait()
        answer = b"%s got %d bytes" % (url, len(body))
        headers.append((b"content-length", b"%d" % len(answer)))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


async def _app_route(request: Request) -> Response:
    return Response(b"app got %d bytes" % len(await request.body()), media_type="text/plain")


def _serve(protocol_class: Any, *, header_timeout: float = 30, keep_alive: float = 5) -> Any:
    app = Starlette(routes=[Route(p, _app_route, methods=["POST"]) for p in ("/decline", "/app")])
    handlers = Handlers()
    ready_answers(app).answer = lambda method, url, headers: b"\r\nready" if url == b"/ready" else None
    ready_answers(app).direct = handlers.direct
    config = uvicorn.Config(
        app,
        http=protocol_class,
        lifespan="off",
        log_level="critical",
        access_log=False,
        timeout_keep_alive=keep_alive,  # type: ignore[arg-type]  # uvicorn says int
    )
    http_protocol.configure(config, header_timeout=header_timeout, max_header_bytes=65536)
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"today"), (b"server", b"uvicorn")]
    protocol = config.http_protocol_class(
        config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = MemoryTransport()
    protocol.connection_made(transport)
    return protocol, transport, handlers


@pytest.fixture(params=PROTOCOLS, ids=lambda cls: cls.__name__)
async def served(request: pytest.FixtureRequest) -> Any:
    protocol, transport, handlers = _serve(request.param)
    yield protocol, transport, handlers
    protocol.connection_lost(None)


def _request(path: bytes, body: bytes = b"{}") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n%s" % (path, len(body), body)


async def _until(condition: Any) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + 10
    while not condition():
        assert loop.time() < give_up, "not there in 10 s"
        await asyncio.sleep(0.002)


class Writes(MemoryTransport):
    """Counts the writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        super().write(data)


async def test_an_answer_at_once_is_one_write_with_the_servers_headers(served: Any) -> None:
    protocol, _, handlers = served
    transport = Writes()
    protocol.connection_made(transport)
    protocol.data_received(_request(b"/now", b'{"a": 1}'))
    await _until(lambda: transport.written.endswith(b"bytes"))
    assert handlers.ran == [b"/now"] and transport.writes == 1
    assert bytes(transport.written) == (
        b"HTTP/1.1 200 OK\r\ndate: today\r\nserver: uvicorn\r\ncontent-type: text/plain\r\ncontent-length: 16\r\n"
        b"\r\n/now got 8 bytes"
    )
    assert protocol.server_state.total_requests == 1 and protocol._idle()


async def test_a_waiting_handler_keeps_the_connections_requests_in_order(served: Any) -> None:
    protocol, transport, handlers = served
    protocol.data_received(_request(b"/wait", b"12345") + _request(b"/app", b"abc") + _request(b"/app", b"abcd"))
    await asyncio.sleep(0.01)
    assert transport.written == b""  # the pipelined requests wait for the first (they take uvicorn's path)
    handlers.release.set()
    await _until(lambda: transport.written.count(b"HTTP/1.1 200 OK") == 3)
    written = bytes(transport.written)
    assert written.index(b"/wait got 5 bytes") < written.index(b"app got 3 bytes") < written.index(b"app got 4")
    assert not transport.closed and protocol.server_state.total_requests == 3
    transport.written.clear()
    protocol.data_received(_request(b"/now"))  # the connection idle again: run from the parser
    await _until(lambda: transport.written.endswith(b"bytes"))
    assert handlers.ran == [b"/wait", b"/now"] and bytes(transport.written).endswith(b"/now got 2 bytes")


async def test_a_handler_can_stream_its_answer(served: Any) -> None:
    protocol, transport, handlers = served
    handlers.stream = True
    protocol.data_received(_request(b"/wait") + _request(b"/app"))
    await _until(lambda: b"first " in transport.written)
    assert b"transfer-encoding: chunked\r\n\r\n6\r\nfirst \r\n" in transport.written
    assert b"app got" not in transport.written
    handlers.release.set()
    await _until(lambda: b"app got" in transport.written)
    assert bytes(transport.written).index(b"4\r\nlast\r\n0\r\n\r\n") < bytes(transport.written).index(b"app got")


@pytest.mark.parametrize("path", [b"/raise", b"/silent"])
async def test_a_handler_that_raises_or_never_answers_is_a_500_and_the_connection_serves_on(
    served: Any, path: bytes
) -> None:
    protocol, transport, _ = served
    protocol.data_received(_request(path))
    await _until(lambda: b"\r\n\r\n" in transport.written)
    head, _, body = bytes(transport.written).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 500 Internal Server Error\r\n") and b"content-type: application/json" in head
    told = json.loads(body)
    assert told == "ValueError('the handler broke')" if path == b"/raise" else "without answering" in told
    transport.written.clear()
    protocol.data_received(_request(b"/now"))
    await _until(lambda: transport.written.endswith(b"bytes"))
    assert bytes(transport.written).endswith(b"/now got 2 bytes") and not transport.closed


async def test_a_declined_request_is_the_apps_body_included(served: Any) -> None:
    protocol, transport, handlers = served
    protocol.data_received(_request(b"/decline", b"abcdef"))
    await _until(lambda: b"bytes" in transport.written)
    assert bytes(transport.written).endswith(b"app got 6 bytes") and handlers.ran == []


async def test_a_body_in_pieces_is_given_whole(served: Any) -> None:
    protocol, transport, _ = served
    raw = _request(b"/now", b'{"long": "' + b"x" * 100 + b'"}')
    for start in range(0, len(raw), 7):
        protocol.data_received(raw[start : start + 7])
    await _until(lambda: transport.written.endswith(b"bytes"))
    assert bytes(transport.written).endswith(b"/now got 112 bytes")


async def test_a_shutdown_lets_the_running_request_finish_then_closes(served: Any) -> None:
    protocol, transport, handlers = served
    protocol.data_received(_request(b"/wait"))
    await asyncio.sleep(0.01)
    protocol.shutdown()
    assert not transport.closed
    handlers.release.set()
    await _until(lambda: transport.closed)
    assert bytes(transport.written).endswith(b"/wait got 2 bytes")


async def test_a_client_gone_mid_request_gets_nothing_written(served: Any) -> None:
    protocol, transport, handlers = served
    protocol.data_received(_request(b"/wait"))
    await asyncio.sleep(0.01)
    transport.closed = True
    protocol.connection_lost(None)
    handlers.release.set()
    await asyncio.sleep(0.01)
    assert transport.written == b""


@pytest.mark.parametrize("path", [b"/now", b"/ready"])
async def test_an_idle_connection_answered_from_the_parser_closes_at_the_keep_alive_time_with_no_timer_per_answer(
    path: bytes,
) -> None:
    """uvicorn arms a keep-alive timer per response (made and cancelled per request); an answer given from the parser
    (ready or direct) leaves that to the connection's one timer, which closes it as uvicorn's would: idle for the
    keep-alive time after the answer."""
    protocol, transport, _ = _serve(http_protocol.GuardedHttpToolsProtocol, keep_alive=0.05)
    try:
        for _ in range(3):
            transport.written.clear()
            protocol.data_received(_request(path))
            await _until(lambda: transport.written.endswith(b"bytes") or transport.written.endswith(b"ready"))
            assert protocol.timeout_keep_alive_task is None and not transport.closed
        await _until(lambda: transport.closed)
    finally:
        protocol.connection_lost(None)


async def test_a_next_request_begun_within_the_keep_alive_time_has_the_header_deadline() -> None:
    """After an answer given from the parser, a next request's first bytes within the keep-alive time keep the
    connection open past it (as when uvicorn's keep-alive timer is cancelled by them); its headers still have their
    deadline."""
    protocol, transport, _ = _serve(http_protocol.GuardedHttpToolsProtocol, header_timeout=2, keep_alive=0.05)
    try:
        protocol.data_received(_request(b"/ready"))
        assert transport.written.endswith(b"ready")
        protocol.data_received(b"POST /now HT")  # a request's first bytes: no longer idle
        await asyncio.sleep(0.3)
        assert not transport.closed
        await _until(lambda: transport.closed)  # its headers never complete: closed at the header deadline
    finally:
        protocol.connection_lost(None)
