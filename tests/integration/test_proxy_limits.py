"""What HAProxy in front of ``ngym run NAME --workers 2`` takes is what a worker takes: request headers up to the
server's ``max_request_header_bytes``, and a typed seed routed by its ``resources_session_id`` though the id comes
after tens of kilobytes of ``task_data`` (HAProxy's default 16 KB buffer refused the one with a 400, or a reset
under load, and sent the other to the least-loaded worker: 3 of 6 answered 503 by the worker that does not own
the id)."""

from __future__ import annotations

import json
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
