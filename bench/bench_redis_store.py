"""Rollouts/s of the counter environment: Redis store with 1, 2, 4 workers vs the memory store (1 worker).

Every point runs ``ngym run example_session_state_mgmt --workers N`` as a real process on 127.0.0.1 and drives
it with the same load tool in this process (aiohttp, CONCURRENCY rollouts in flight, each: seed_session →
increment_counter → get_counter_value → verify, the cookie copied by hand; rewards checked) for DURATION
seconds after a short warm-up. Redis round trips per rollout come from ``INFO commandstats`` (calls of every
command, before/after a measured run, divided by the rollouts it completed).

    .venv/bin/python bench/bench_redis_store.py            # ~30 s; NGYM_BENCH_SECONDS=3 NGYM_BENCH_CONCURRENCY=32

The load generator shares the machine's cores with the servers, so more workers than free cores cannot
scale linearly; the numbers are ratios measured in one run, on one machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from ngym_redis.testing import RedisServer

from ngym.child_server import free_port, start_environment, stop_process, wait_healthy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.entry, when run as a script
from bench.entry import prepare  # noqa: E402

ENV = "example_session_state_mgmt"
DURATION = float(os.environ.get("NGYM_BENCH_SECONDS", "3"))
WARMUP = 0.5
CONCURRENCY = int(os.environ.get("NGYM_BENCH_CONCURRENCY", "32"))
#: Commands the store's Lua scripts run inside Redis (not round trips; INFO commandstats counts them too).
SCRIPT_INNER = {"time", "zscore", "zcard", "set", "zadd", "get", "pexpire", "zrem", "del", "zrangebyscore"}
RESPONSE = {
    "id": "resp_bench",
    "created_at": 0,
    "model": "bench",
    "object": "response",
    "output": [],
    "parallel_tool_calls": False,
    "tool_choice": "auto",
    "tools": [],
}


class Server:
    def __init__(self, workers: int, store: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {"NGYM_SESSION_STORE": store, "NGYM_SESSION_SECRET": "bench-secret"}
        self.proc = start_environment(ENV, port=self.port, workers=workers, env=env, log=log)
        wait_healthy(self.url, self.proc, 60, log, path="/livez")
        time.sleep(0.5 * workers)  # every worker up, not only the first

    def stop(self) -> None:
        stop_process(self.proc, grace=20)


async def one_rollout(session: aiohttp.ClientSession, url: str, start: int) -> float:
    cookie: dict[str, str] = {}

    async def post(path: str, body: dict[str, Any]) -> Any:
        async with session.post(f"{url}{path}", json=body, headers=cookie) as response:
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status} {await response.text()}")
            set_cookie = response.headers.get("set-cookie")
            if set_cookie:
                cookie["cookie"] = set_cookie.split(";", 1)[0]
            return await response.json()

    await post("/seed_session", {"initial_count": start})
    await post("/increment_counter", {"count": 2})
    await post("/get_counter_value", {})
    verified = await post(
        "/verify", {"expected_count": start + 2, "responses_create_params": {"input": []}, "response": RESPONSE}
    )
    return float(verified["reward"])


async def drive(url: str, seconds: float) -> tuple[int, int, float]:
    """Rollouts completed (reward 1.0), failures, and elapsed seconds, CONCURRENCY in flight for ``seconds``."""
    done = failed = 0
    stop_at = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=CONCURRENCY, force_close=False)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:

        async def loop(index: int) -> None:
            nonlocal done, failed
            n = index
            while time.monotonic() < stop_at:
                try:
                    reward = await one_rollout(session, url, n % 50)
                    if reward == 1.0:
                        done += 1
                    else:
                        failed += 1
                except Exception:
                    failed += 1
                n += CONCURRENCY

        started = time.monotonic()
        await asyncio.gather(*(loop(i) for i in range(CONCURRENCY)))
        return done, failed, time.monotonic() - started


def measure(workers: int, store: str, redis: RedisServer | None, tmp: Path) -> dict[str, Any]:
    server = Server(workers, store, tmp / f"ngym-{workers}-{'redis' if redis else 'memory'}.log")
    try:
        asyncio.run(drive(server.url, WARMUP))
        if redis is not None:
            with redis.client() as client:
                client.config_resetstat()
        done, failed, elapsed = asyncio.run(drive(server.url, DURATION))
        point: dict[str, Any] = {
            "store": "redis" if redis else "memory",
            "workers": workers,
            "rollouts": done,
            "failed": failed,
            "rollouts_per_s": round(done / elapsed, 1),
        }
        if redis is not None:
            stats = {k: v for k, v in redis.commandstats().items() if k not in ("info", "config|resetstat")}
            # Commands inside scripts are counted too; the store sends only EVALSHA (+ connection set-up).
            trips = sum(n for name, n in stats.items() if name not in SCRIPT_INNER)
            point["redis_round_trips_per_rollout"] = round(trips / max(done, 1), 2)
            point["redis_commands_per_rollout"] = round(sum(stats.values()) / max(done, 1), 2)
            point["redis_commands"] = stats
        return point
    finally:
        server.stop()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ngym-bench-redis-") as folder:
        tmp = Path(folder)
        with RedisServer.start(tmp / "redis") as redis:
            points = [measure(1, "memory", None, tmp)]
            for workers in (1, 2, 4):
                with redis.client() as client:
                    client.flushall()
                points.append(measure(workers, redis.url, redis, tmp))
    base = points[0]["rollouts_per_s"] or 1.0
    print(f"counter env, {CONCURRENCY} rollouts in flight, {DURATION:.0f}s per point, {os.cpu_count()} cores")
    print(f"{'store':<8}{'workers':>8}{'rollouts/s':>13}{'vs memory':>11}{'failed':>8}{'round trips/rollout':>21}")
    for p in points:
        ratio = p["rollouts_per_s"] / base
        rt = p.get("redis_round_trips_per_rollout", "-")
        print(f"{p['store']:<8}{p['workers']:>8}{p['rollouts_per_s']:>13}{ratio:>10.2f}x{p['failed']:>8}{rt!s:>21}")
    print(json.dumps({"bench": "redis_store", "points": points}))
    if any(p["failed"] for p in points):
        raise SystemExit("some rollouts failed or scored wrong")


if __name__ == "__main__":
    prepare(__doc__)
    main()
