"""ngym's HTTP protocols in process (uvicorn's own protocol objects, httptools and h11, an in-memory transport): what
they tell the app about a request's body, and that the body limits then leave a whole body alone but still bound one
still arriving."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from ngym.server.pipeline import http_protocol, lingering_close
from ngym.server.pipeline.request_limits import BODY_BYTES_KEY, RequestLimitsMiddleware
from ngym.testing.memory_transport import MemoryTransport
from tests.unit.test_request_limits import read_body_app

PROTOCOLS = [http_protocol.GuardedH11Protocol]
if http_protocol.GuardedHttpToolsProtocol is not None:  # an optional uvicorn dependency; installed with ngym
    PROTOCOLS.append(http_protocol.GuardedHttpToolsProtocol)
if http_protocol.ProxiedHttpToolsProtocol is not None:  # a worker of --workers N only HAProxy reaches
    PROTOCOLS.append(http_protocol.ProxiedHttpToolsProtocol)


@pytest.fixture(params=PROTOCOLS, ids=lambda cls: cls.__name__)
def protocol_class(request: pytest.FixtureRequest) -> Any:
    return request.param


def _connection(
    app: Any,
    protocol_class: Any,
    transport: MemoryTransport | None = None,
    *,
    header_timeout: float = 30,
    keep_alive: float = 5,
) -> tuple[Any, MemoryTransport]:
    # h11's own cap on an incomplete event set as ngym.server.hosting.host sets it
    config = uvicorn.Config(
        app,
        http=protocol_class,
        lifespan="off",
        log_level="warning",
        h11_max_incomplete_event_size=65536,
        timeout_keep_alive=keep_alive,  # type: ignore[arg-type]  # uvicorn says int
    )
    http_protocol.configure(config, header_timeout=header_timeout, max_header_bytes=65536)
    config.load()
    protocol = config.http_protocol_class(
        config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = transport or MemoryTransport()
    protocol.connection_made(transport)
    return protocol, transport


def _head(length: int) -> bytes:
    return b"POST /x HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % length


async def _until(condition: Any, seconds: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + seconds
    while not condition():
        if loop.time() > give_up:
            raise AssertionError("the app did not get there")
        await asyncio.sleep(0.005)


def _recording_app(seen: dict[str, Any]) -> Any:
    """Notes what the scope says about the body when the app starts, whether ``receive`` reached it unwrapped,
    and what it read; answers 200 with the body's length."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["at_start"] = scope.get(BODY_BYTES_KEY)
        seen["receive_unwrapped"] = type(getattr(receive, "__self__", None)).__name__ == "RequestResponseCycle"
        await read_body_app(scope, receive, send)

    return app


async def test_a_body_that_came_with_its_headers_is_announced_and_passes_the_limits_as_is(protocol_class: Any) -> None:
    seen: dict[str, Any] = {}
    protocol, transport = _connection(RequestLimitsMiddleware(_recording_app(seen), 1024, 5), protocol_class)
    protocol.data_received(_head(11) + b'{"a": "bc"}')
    await _until(lambda: protocol.cycle.response_complete)
    assert seen == {"at_start": 11, "receive_unwrapped": True}
    assert transport.written.startswith(b"HTTP/1.1 200 ") and b"\r\n11\r\n" in transport.written


async def test_a_body_still_arriving_is_not_announced_and_stays_bounded(protocol_class: Any) -> None:
    seen: dict[str, Any] = {}
    protocol, transport = _connection(RequestLimitsMiddleware(_recording_app(seen), 1024, 0.2), protocol_class)
    protocol.data_received(_head(100) + b'{"a": ')  # the rest never comes
    await _until(lambda: transport.closed)
    assert seen == {"at_start": None, "receive_unwrapped": False}
    assert transport.written.startswith(b"HTTP/1.1 408 ")


async def test_a_whole_body_over_the_cap_is_still_refused(protocol_class: Any) -> None:
    seen: dict[str, Any] = {}
    protocol, transport = _connection(RequestLimitsMiddleware(_recording_app(seen), 1024, 5), protocol_class)
    protocol.data_received(_head(2000) + b"x" * 2000)
    await _until(lambda: transport.closed)
    assert transport.written.startswith(b"HTTP/1.1 413 ") and seen == {}


async def test_each_request_of_a_keep_alive_connection_announces_its_own_body(protocol_class: Any) -> None:
    sizes: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        sizes.append(scope.get(BODY_BYTES_KEY))
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    protocol, transport = _connection(app, protocol_class)
    for body in (b"{}", b'{"city": "Paris"}', b""):
        protocol.data_received(_head(len(body)) + body)
        await _until(lambda: protocol.cycle.response_complete)
    assert sizes == [2, 17, 0] and not transport.closed


async def test_pipelined_requests_are_each_answered_in_order_on_the_kept_connection(protocol_class: Any) -> None:
    """Two requests in one read: the second waits for the first's answer, then runs (uvicorn's pipeline path, which
    the worker behind HAProxy shares with every other server)."""

    async def echo_app(scope: Any, receive: Any, send: Any) -> None:
        body = (await receive())["body"]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    protocol, transport = _connection(echo_app, protocol_class)
    protocol.data_received(_head(3) + b"one" + _head(3) + b"two")
    await _until(lambda: transport.written.count(b"HTTP/1.1 200 ") == 2)
    first, second = transport.written.split(b"HTTP/1.1 200 ")[1:]
    assert first.endswith(b"\r\n\r\none") and second.endswith(b"\r\n\r\ntwo") and not transport.closed
    protocol.data_received(_head(5) + b"three")  # the connection still serves
    await _until(lambda: transport.written.endswith(b"three"))


def _big_header_request(header_bytes: int) -> bytes:
    return b"GET / HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * header_bytes + b"\r\n\r\n"


@pytest.mark.parametrize("reads", [1, 2, 7])
async def test_a_header_block_over_the_cap_is_431_however_few_reads_carry_it(protocol_class: Any, reads: int) -> None:
    """Before, a block that completed within two socket reads was never counted: 100,000 bytes got a 200."""
    seen: dict[str, Any] = {}
    protocol, transport = _connection(_recording_app(seen), protocol_class)
    request = _big_header_request(100_000)
    step = -(-len(request) // reads)
    for i in range(0, len(request), step):
        if transport.closed:
            break
        protocol.data_received(request[i : i + step])
    await _until(lambda: transport.closed)
    assert transport.written.startswith(b"HTTP/1.1 431 ") and seen == {}  # the app never ran


async def test_headers_under_the_cap_with_a_large_body_in_the_same_read_are_served(protocol_class: Any) -> None:
    seen: dict[str, Any] = {}
    protocol, transport = _connection(_recording_app(seen), protocol_class)
    protocol.data_received(_head(200_000) + b"x" * 200_000)  # 200 KB in one read, the headers ~90 bytes of it
    await _until(lambda: protocol.cycle is not None and protocol.cycle.response_complete)
    assert transport.written.startswith(b"HTTP/1.1 200 ") and b"200000" in transport.written
    protocol2, transport2 = _connection(_recording_app({}), protocol_class)
    protocol2.data_received(_big_header_request(60_000))  # under the 65,536 cap, in one read
    await _until(lambda: protocol2.cycle is not None and protocol2.cycle.response_complete)
    assert transport2.written.startswith(b"HTTP/1.1 200 ")


async def _answer_unread(scope: Any, receive: Any, send: Any) -> None:
    """Answers 413 at once, the body unread, as the body and budget limits refuse a declared size."""
    body = b'{"detail": "too large"}'
    headers = [(b"content-length", b"%d" % len(body)), (b"connection", b"close")]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def test_an_answer_given_before_the_body_arrived_is_followed_by_a_lingering_close(protocol_class: Any) -> None:
    """Closing at once with the body unread reset the connection: behind HAProxy (``--workers 2``) the client got
    "server disconnected" instead of the 413. Now the server ends its side, drops the rest of the body, and closes
    when the client is done."""
    protocol, transport = _connection(_answer_unread, protocol_class, MemoryTransport(can_write_eof=True))
    protocol.data_received(_head(1_000_000) + b"x" * 1000)
    await _until(lambda: transport.eof or transport.closed)
    assert transport.written.startswith(b"HTTP/1.1 413 ")
    assert transport.eof and not transport.closed
    for _ in range(10):  # the rest of the body: dropped, never read as a request (no 400, no 431)
        protocol.data_received(b"x" * 99_900)
    assert transport.written.count(b"HTTP/1.1 ") == 1 and not transport.closed
    protocol.connection_lost(None)  # the client closed its side: the linger timer goes with the connection


async def test_a_lingering_close_ends_past_its_byte_bound_or_its_time(
    protocol_class: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lingering_close, "LINGER_BYTES", 150_000)
    protocol, transport = _connection(_answer_unread, protocol_class, MemoryTransport(can_write_eof=True))
    protocol.data_received(_head(1_000_000) + b"x" * 1000)
    await _until(lambda: transport.eof)
    protocol.data_received(b"x" * 100_000)
    assert not transport.closed
    protocol.data_received(b"x" * 100_000)
    assert transport.closed
    monkeypatch.setattr(lingering_close, "LINGER_SECONDS", 0.01)
    protocol, transport = _connection(_answer_unread, protocol_class, MemoryTransport(can_write_eof=True))
    protocol.data_received(_head(1_000_000) + b"x" * 1000)
    await _until(lambda: transport.closed)  # the client never sends the rest: closed when the linger ends
    assert transport.eof and transport.written.count(b"HTTP/1.1 ") == 1


async def test_a_body_answered_unread_on_a_kept_connection_is_not_counted_as_headers(protocol_class: Any) -> None:
    """An answer that keeps the connection (a 404 for an unknown route) before the body came: the rest of the body
    is that request's, not a header block (it was counted as one and answered 431 past 64 KiB)."""

    async def not_found(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    protocol, transport = _connection(not_found, protocol_class, MemoryTransport(can_write_eof=True))
    protocol.data_received(_head(300_000) + b"x" * 1000)
    await _until(lambda: protocol.cycle.response_complete)
    for _ in range(3):
        protocol.data_received(b"x" * 99_000)
    protocol.data_received(b"x" * 2000)  # the body's last bytes: the request is complete
    assert b"431" not in transport.written, bytes(transport.written)


async def test_a_connection_whose_early_answered_body_has_all_arrived_closes_at_once(protocol_class: Any) -> None:
    """Once the rest of a body answered early has all come, nothing is left to drop: a later close (shutdown, the
    keep-alive timeout) is immediate, not a linger."""

    async def not_found(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    protocol, transport = _connection(not_found, protocol_class, MemoryTransport(can_write_eof=True))
    protocol.data_received(_head(200_000) + b"x" * 1000)
    await _until(lambda: protocol.cycle.response_complete)
    protocol.data_received(b"x" * 199_000)  # the body's last bytes
    protocol.shutdown()
    assert transport.closed and not transport.eof


class _CountingTransport(MemoryTransport):
    """Also keeps each write apart: one per system call on a real socket (an empty write makes none)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        if data:
            self.writes.append(bytes(data))
        super().write(data)


async def test_a_response_is_one_write(protocol_class: Any) -> None:
    """uvicorn wrote the status line and headers, then the body: two system calls per response, and the peer
    (HAProxy, or the client) woken for each."""

    async def json_app(scope: Any, receive: Any, send: Any) -> None:  # as Starlette answers: a content-length
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"{}"})

    protocol, transport = _connection(json_app, protocol_class, _CountingTransport())
    for count in (1, 2):  # and again on the kept connection
        protocol.data_received(_head(11) + b'{"a": "bc"}')
        await _until(lambda: len(transport.writes) == count)  # noqa: B023
        await asyncio.sleep(0.01)
    assert len(transport.writes) == 2, transport.writes
    assert all(w.startswith(b"HTTP/1.1 200 ") and w.endswith(b"\r\n\r\n{}") for w in transport.writes)


async def test_a_response_whose_body_is_not_ready_sends_its_head_in_the_same_turn(protocol_class: Any) -> None:
    """The head waits for its body only within the event loop's turn: a stream whose first chunk comes later (a
    server-sent event) or a response with no body at all shows its status at once."""
    go = asyncio.Event()

    async def stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await go.wait()
        await send({"type": "http.response.body", "body": b"late", "more_body": False})

    protocol, transport = _connection(stream, protocol_class, _CountingTransport())
    protocol.data_received(b"GET /s HTTP/1.1\r\nhost: t\r\n\r\n")
    await _until(lambda: bool(transport.writes))
    assert transport.writes[0].startswith(b"HTTP/1.1 200 ") and b"late" not in transport.writes[0]
    go.set()
    await _until(lambda: protocol.cycle.response_complete)
    assert b"late" in bytes(transport.written)

    async def no_body(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b""})  # HEAD: uvicorn writes nothing for the body

    protocol, transport = _connection(no_body, protocol_class, _CountingTransport())
    protocol.data_received(b"HEAD /h HTTP/1.1\r\nhost: t\r\n\r\n")
    await _until(lambda: bool(transport.writes))
    await asyncio.sleep(0.01)
    assert len(transport.writes) == 1 and transport.writes[0].startswith(b"HTTP/1.1 200 ")


async def test_an_interim_answer_is_not_held(protocol_class: Any) -> None:
    """A 100 Continue is written at once: the client waits for it before it sends the body."""
    protocol, transport = _connection(read_body_app, protocol_class, _CountingTransport())
    protocol.data_received(_head(11)[:-2] + b"expect: 100-continue\r\n\r\n")
    await _until(lambda: bool(transport.writes))
    assert transport.writes[0].startswith(b"HTTP/1.1 100 ")
    protocol.data_received(b'{"a": "bc"}')
    await _until(lambda: protocol.cycle.response_complete)


async def test_an_idle_connection_is_closed_after_the_keep_alive_time(
    protocol_class: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Every protocol closes a connection idle for ``keep_alive_timeout_seconds``, without a log line; behind
    HAProxy (proxied) by the connection's own timer, with no keep-alive timer made and cancelled per request as
    uvicorn does."""
    caplog.set_level("INFO", logger="ngym.server")
    protocol, transport = _connection(read_body_app, protocol_class, keep_alive=0.2)
    protocol.data_received(_head(11) + b'{"a": "bc"}')
    await _until(lambda: protocol.cycle.response_complete)
    assert (protocol.timeout_keep_alive_task is None) == (protocol_class is http_protocol.ProxiedHttpToolsProtocol)
    await _until(lambda: transport.closed)
    assert not caplog.records


async def test_a_silent_or_trickling_connection_is_closed_at_the_header_deadline(protocol_class: Any) -> None:
    protocol, silent = _connection(read_body_app, protocol_class, header_timeout=0.2)
    protocol, trickling = _connection(read_body_app, protocol_class, header_timeout=0.2)
    protocol.data_received(b"GET / HTTP/1.1\r\nhost: t\r\n")
    for _ in range(100):  # keeps sending, never completes the headers
        if trickling.closed:
            break
        protocol.data_received(b"x-slow: 1\r\n")
        await asyncio.sleep(0.01)
    await _until(lambda: silent.closed and trickling.closed)
    assert trickling.written == b""


async def test_behind_haproxy_the_idle_close_comes_at_the_keep_alive_time_and_headers_still_have_their_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The one timer of a proxied connection waits the shorter of the two: idle after a response, it closes at the
    keep-alive time; headers started and not completed are still closed (and logged) at the header deadline."""
    if http_protocol.ProxiedHttpToolsProtocol is None:
        pytest.skip("httptools not installed")
    caplog.set_level("INFO", logger="ngym.server")
    proxied = http_protocol.ProxiedHttpToolsProtocol
    protocol, transport = _connection(read_body_app, proxied, header_timeout=30, keep_alive=0.2)
    assert protocol._ngym_seconds == 0.2
    protocol, trickling = _connection(read_body_app, proxied, header_timeout=0.2, keep_alive=30)
    assert protocol._ngym_seconds == 0.2
    protocol.data_received(b"GET / HTTP/1.1\r\nhost: t\r\n")
    await _until(lambda: trickling.closed)
    assert [r.getMessage() for r in caplog.records] == [
        "127.0.0.1:50000: no complete request headers in time; connection closed"
    ]


class _ClosedRefusesWrites(MemoryTransport):
    """As uvloop's transports: writing to one that is closed raises."""

    def write(self, data: bytes) -> None:
        if self.closed:
            raise RuntimeError("unable to perform operation: the handler is closed")
        super().write(data)


async def test_a_held_head_of_a_connection_closed_meanwhile_is_dropped_quietly(protocol_class: Any) -> None:
    gone = asyncio.Event()
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))

    async def stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        transport.closed = True  # the peer reset the connection: the transport closed under the protocol
        gone.set()

    protocol, transport = _connection(stream, protocol_class, _ClosedRefusesWrites())
    protocol.data_received(b"GET /s HTTP/1.1\r\nhost: t\r\n\r\n")
    await gone.wait()
    for _ in range(3):
        await asyncio.sleep(0)
    assert transport.written == b"" and errors == []
