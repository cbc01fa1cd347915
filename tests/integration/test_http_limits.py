"""HTTP limits of a real ``ngym run`` server on a real socket: body size (413, before parsing), body and header
deadlines, header size (431), idle connections closed, a client leaving mid-body logged as one line."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from ngym.child_server import free_port

from .conftest import Served, start

LIMITS = [
    "max_request_body_bytes=200000",
    "request_body_timeout_seconds=1",
    "request_header_timeout_seconds=1",
    "max_request_header_bytes=8192",
    "keep_alive_timeout_seconds=1",
]
# Generous waits for "the server closed it": the limits are 1 s; a loaded CI machine may be slow.
PATIENCE = 15.0


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    port = free_port()
    cmd = [sys.executable, "-m", "ngym.cli", "run", "example_single_tool_call", "--port", str(port), *LIMITS]
    served = start(cmd, port)
    yield served
    if served.proc.poll() is None:
        served.proc.kill()
        served.proc.wait()


def connect(served: Served) -> socket.socket:
    host, port = served.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(PATIENCE)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout here fails the test)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def post_head(path: str, length: int | None, extra: str = "") -> bytes:
    size = f"content-length: {length}\r\n" if length is not None else "transfer-encoding: chunked\r\n"
    return f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n{size}{extra}\r\n".encode()


def test_a_declared_big_body_is_413_at_once_and_the_server_keeps_serving(server: Served) -> None:
    with connect(server) as sock:
        sock.sendall(post_head("/verify", 50_000_000) + b'{"a": "')
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413 ") and b"max_request_body_bytes" in answer
    assert httpx.get(f"{server.url}/health", timeout=PATIENCE).status_code == 200


def test_a_chunked_big_body_is_413_once_it_passes_the_limit(server: Served) -> None:
    with connect(server) as sock:
        sock.sendall(post_head("/verify", None))
        # Just over the limit, then silence (no last chunk): everything sent is read, so nothing unread makes the
        # server's close a reset that could overtake its answer.
        for chunk in [b"x" * 50_000] * 4 + [b"y" * 10]:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


def test_a_body_that_does_not_arrive_in_time_is_408(server: Served) -> None:
    with connect(server) as sock:
        sock.sendall(post_head("/verify", 1000) + b'{"responses_create_params": ')
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"request_body_timeout_seconds" in answer


def test_a_connection_that_sends_nothing_or_trickles_headers_is_closed(server: Served) -> None:
    with connect(server) as silent, connect(server) as trickling:
        trickling.sendall(b"GET / HTTP/1.1\r\nhost: t\r\n")
        started = time.monotonic()
        assert read_until_closed(silent) == b""
        while time.monotonic() - started < 3:  # keeps sending, but never completes the headers
            try:
                trickling.sendall(b"x-slow: 1\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.2)
        assert read_until_closed(trickling) == b""


def test_the_server_settings_reach_uvicorn() -> None:
    from ngym.server.hosting.host import uvicorn_config
    from ngym.server.pipeline.app import ServeSpec, build_server
    from ngym.server.pipeline.http_protocol import GuardedH11Protocol, GuardedHttpToolsProtocol

    fields = dict(line.split("=") for line in LIMITS)
    server = build_server(
        ServeSpec(target="example_single_tool_call.app:WeatherResourcesServer", name="w", fields=fields)
    )
    config = uvicorn_config(server, app=None)
    assert config.timeout_keep_alive == 1 and config.h11_max_incomplete_event_size == 8192
    assert config.http in (GuardedHttpToolsProtocol, GuardedH11Protocol)
    assert (config.ngym_header_timeout, config.ngym_max_header_bytes) == (1, 8192)
    assert config.ws_per_message_deflate is False
    fields["websocket_compression"] = "true"
    compressing = build_server(
        ServeSpec(target="example_single_tool_call.app:WeatherResourcesServer", name="w", fields=fields)
    )
    assert uvicorn_config(compressing, app=None).ws_per_message_deflate is True


def test_websockets_are_not_compressed_unless_asked(server: Served) -> None:
    """OpenEnv's client offers permessage-deflate; the server declines it (websocket_compression off): a reset's
    row crosses uncompressed, as NeMo Gym's HTTP bodies do, and costs no compression CPU on either side."""
    from websockets.sync.client import connect as ws_connect

    with ws_connect(server.url.replace("http://", "ws://") + "/openenv/ws", compression="deflate") as socket_:
        assert socket_.response is not None
        assert "Sec-WebSocket-Extensions" not in socket_.response.headers
        socket_.send('{"type": "state"}')
        assert '"episode_id"' in str(socket_.recv(timeout=PATIENCE))


def test_a_websocket_outlives_the_header_deadline_and_the_keep_alive_time(server: Served) -> None:
    """Both are 1 s here: a WebSocket (an OpenEnv episode) that has been open for several times that is still
    served; the header deadline used to close every WebSocket once it passed, however busy."""
    from websockets.sync.client import connect as ws_connect

    with ws_connect(server.url.replace("http://", "ws://") + "/openenv/ws") as socket_:
        socket_.send('{"type": "reset", "data": {}}')
        assert '"observation"' in str(socket_.recv(timeout=PATIENCE))
        opened = time.monotonic()
        while time.monotonic() - opened < 3.5:  # past both 1 s limits, with a request every half second
            time.sleep(0.5)
            socket_.send('{"type": "state"}')
            assert '"episode_id"' in str(socket_.recv(timeout=PATIENCE))


def test_headers_still_incomplete_past_the_limit_are_431(server: Served) -> None:
    with connect(server) as sock:
        try:
            sock.sendall(b"GET / HTTP/1.1\r\nhost: t\r\n")
            for _ in range(50):  # endless headers, never complete
                sock.sendall(b"x-big: " + b"a" * 2_000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            answer = read_until_closed(sock)
        except ConnectionResetError:  # closed with our unread bytes in its buffer: the 431 may be lost on the way
            answer = b"reset"
    assert answer.startswith(b"HTTP/1.1 431 ") or answer == b"reset", answer[:100]


def test_a_complete_header_block_over_the_limit_sent_at_once_is_431(server: Served) -> None:
    # Before, a block that completed within two socket reads was never counted (12,000 bytes: 200 with 8,192)
    with connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * 12_000 + b"\r\n\r\n")
        try:
            answer = read_until_closed(sock)
        except ConnectionResetError:
            answer = b"reset"
    assert answer.startswith(b"HTTP/1.1 431 ") or answer == b"reset", answer[:100]
    assert httpx.get(f"{server.url}/", headers={"x-ok": "a" * 6_000}, timeout=PATIENCE).status_code == 200


def test_a_client_leaving_mid_body_is_one_info_line(server: Served) -> None:
    for path in ("/verify", "/seed_session", "/close_session", "/get_weather"):
        with connect(server) as sock:
            sock.sendall(post_head(path, 10_000) + b'{"city": "')
            time.sleep(0.2)
    assert httpx.get(f"{server.url}/health", timeout=PATIENCE).status_code == 200
    server.proc.terminate()
    log = server.proc.communicate(timeout=30)[0]
    assert "Traceback" not in log and "ERROR" not in log, log
    for path in ("/verify", "/seed_session", "/close_session", "/get_weather"):
        assert f"INFO ngym.server: POST {path}: client disconnected after 10 body bytes of 10000" in log, log
