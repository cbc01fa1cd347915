"""Concurrent seeds over real HTTP against `ngym run`: a seed the session store refuses (503) frees its worker.

Several seeds can pass the session-limit check together; each forks a worker, then the store refuses all but
`max_sessions` of them. Before the fix those workers were never freed: 6 of 8 slots stayed taken with 0 live
sessions until restart.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from ngym.child_server import wait_healthy

ROW = {"responses_create_params": {"input": "x"}, "expected_result": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def seed_many(url: str, n: int) -> list[int]:
    async with httpx.AsyncClient(timeout=60) as http:
        replies = await asyncio.gather(*(http.post(f"{url}/seed_session", json=ROW) for _ in range(n)))
    return [r.status_code for r in replies]


def test_refused_concurrent_seeds_free_their_workers() -> None:
    port = free_port()
    ngym = str(Path(sys.executable).parent / "ngym")
    cmd = [ngym, "run", "math_with_code", "max_sessions=2", "max_workers=8", "preload_modules=[math]"]
    proc = subprocess.Popen([*cmd, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 60)
        statuses = asyncio.run(seed_many(url, 8))
        assert statuses.count(200) == 2 and statuses.count(503) == 6, statuses
        live = httpx.get(f"{url}/health").json()["live_sessions"]
        sandbox = httpx.get(f"{url}/sandbox").json()
        assert live == 2
        assert sandbox["active_workers"] == live, f"{sandbox['active_workers']} slots taken, {live} live sessions"
        # and the slots are usable again: close nothing, yet a new seed is refused only by the session limit
        assert asyncio.run(seed_many(url, 1)) == [503]
        assert httpx.get(f"{url}/sandbox").json()["active_workers"] == 2
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
