"""What HAProxy in front of ``ngym run NAME --workers 2`` takes is what a worker takes: request headers up to the
server's ``max_request_header_bytes``, and a typed seed routed by its ``resources_session_id`` though the id comes
after tens of kilobytes of ``task_data`` (HAProxy's default 16 KB buffer refused the one with a 400, or a reset
under load, and sent the other to the least-loaded worker: 3 of 6 answered 503 by the worker that does not own
the id)."""

from __future__ import annotations

import contextlib
import json
import socket
import time
import zlib

import httpx

from ngym.child_server import free_port
from tests.integration.conftest import VENV_BIN
from tests.integration.test_affine_workers import COUNTER


def test_the_proxy_takes_what_a_worker_takes(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    served = serve([str(VENV_BIN / "ngym"), "run", COUNTER, "--workers", "2", "--port", str(port)], port)
    big_header = httpx.get(f"{served.url}/health", headers={"x-trace": "t" * 30_000}, timeout=30)
    assert big_header.status_code == 200, big_header.text[:200]
    routed = []
    for n in range(8):
        sid = f"resources-session-late-{n}"
        typed = {
            "task_data": {"responses_create_params": {"input": "x" * 30_000}, "initial_count": 0},
            "episode_id": {"rollout_id": f"late-{n}", "attempt": 0},
            "task_id": {"taskset": "t", "task_id": str(n)},
            "resources_session_id": sid,  # after the row, as a client that does not order its keys may send it
        }
        seeded = httpx.post(f"{served.url}/seed_session", content=json.dumps(typed), timeout=30)
        routed.append((seeded.status_code, seeded.headers.get("x-ngym-worker"), f"w{zlib.crc32(sid.encode()) % 2}"))
    assert all(status == 200 and worker == owner for status, worker, owner in routed), routed


def test_behind_the_proxy_a_worker_still_refuses_headers_over_its_limit(serve) -> None:  # type: ignore[no-untyped-def]
    """A worker that only HAProxy reaches serves without uvicorn's per-response timer and headers, and keeps every
    limit: a header block HAProxy's buffer takes (16 KB) but over the server's ``max_request_header_bytes`` is
    still 431 from the worker; under it, served."""
    port = free_port()
    cmd = [
        str(VENV_BIN / "ngym"),
        "run",
        COUNTER,
        "--workers",
        "2",
        "--port",
        str(port),
        "max_request_header_bytes=8192",
    ]
    served = serve(cmd, port)
    over = httpx.get(f"{served.url}/health", headers={"x-trace": "t" * 12_000}, timeout=30)
    assert over.status_code == 431 and over.headers.get("x-ngym-worker") in ("w0", "w1"), over.text[:200]
    under = httpx.get(f"{served.url}/health", headers={"x-trace": "t" * 6_000}, timeout=30)
    assert under.status_code == 200 and "server" not in under.headers


def _answer(sock: socket.socket) -> bytes:
    """What the server sends before it closes (or 10 s pass: the old fixed 60 s limit fails here)."""
    sock.settimeout(10)
    chunks = []
    with contextlib.suppress(TimeoutError, ConnectionResetError):
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_proxy_holds_clients_to_the_servers_time_limits(serve) -> None:  # type: ignore[no-untyped-def]
    """HAProxy reads a request before a worker does, so the server's time settings must be HAProxy's: a request
    whose headers or body stall past ``request_header_timeout_seconds`` / ``request_body_timeout_seconds`` gets a
    408 (for the body, the worker's own message naming the setting; HAProxy's fixed 60 s held them a minute whatever
    the server said), and a keep-alive connection stays open for ``keep_alive_timeout_seconds`` (HAProxy closed it
    after a fixed 5 s)."""
    port = free_port()
    limits = ["request_header_timeout_seconds=1", "request_body_timeout_seconds=1", "keep_alive_timeout_seconds=30"]
    cmd = [str(VENV_BIN / "ngym"), "run", COUNTER, "--workers", "2", "--port", str(port), *limits]
    served = serve(cmd, port)
    idle = socket.create_connection(("127.0.0.1", port), timeout=10)
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200"), "first request on the kept-alive connection"
    idle_since = time.monotonic()

    with socket.create_connection(("127.0.0.1", port), timeout=10) as headers:
        headers.sendall(b"POST /seed_session HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        late_headers = _answer(headers)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as body:
        body.sendall(b"POST /seed_session HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}")  # 8 bytes short
        late_body = _answer(body)
    assert late_headers.startswith(b"HTTP/1.1 408"), late_headers[:200]
    assert late_body.startswith(b"HTTP/1.1 408"), late_body[:200]
    detail = json.loads(late_body.split(b"\r\n\r\n", 1)[1])["detail"]
    assert detail == "request body not received within 1 s (server setting request_body_timeout_seconds)"

    time.sleep(max(0.0, 6.0 - (time.monotonic() - idle_since)))  # past HAProxy's old 5 s, within the 30 s set
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200"), "the kept-alive connection was closed before its time"
    idle.close()
    assert httpx.get(f"{served.url}/health", timeout=10).status_code == 200
