"""Closed-loop load of whole rollouts (seed → recorded tool calls → verify, one session each) and a /health prober.

A Gymnasium-style environment (NeMo Gym's ``GymnasiumServer``: ``/reset`` + ``/step``, no ``/verify``; found by
asking ``/verify`` once before the load) is driven the way NeMo Gym's ``gymnasium_agent`` drives it, as
``tools/nemo_replay_inprocess.py`` replays it: ``/reset``, then one ``/step`` per recorded model turn until the
environment says terminated or truncated; the rollout's reward is the sum of its steps' rewards.

Prints one JSON line: rollouts/s, rollout latency p50/p99, the rewards each row scored (to compare servers),
and ``GET /health`` latency p50/p99/max measured every 50 ms during the load (the event loop's responsiveness).

    python bench/heavy_load.py URL ROWS_JSONL SECONDS CONCURRENCY
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.nemo_replay_inprocess import model_turns  # noqa: E402  (standard library only)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def rollouts(
    session: aiohttp.ClientSession,
    url: str,
    rows: list[dict[str, Any]],
    start: int,
    deadline: float,
    out: dict[str, Any],
) -> None:
    index = start
    while time.monotonic() < deadline:
        row_index = index % len(rows)
        row = rows[row_index]
        index += 1
        seed = {k: v for k, v in row.items() if k != "response"}
        calls = [
            (item["name"], json.loads(item["arguments"]))
            for item in (row.get("response") or {}).get("output") or []
            if item.get("type") == "function_call"
        ]
        began = time.monotonic()
        try:
            async with session.post(f"{url}/seed_session", json=seed) as response:
                await response.read()
                cookie = response.headers.get("set-cookie")
            headers = {"cookie": cookie.split(";", 1)[0]} if cookie else {}
            for name, arguments in calls:  # the recorded tool calls, in order (a code sandbox runs them)
                async with session.post(f"{url}/{name}", json=arguments, headers=headers) as response:
                    await response.read()
                    cookie = response.headers.get("set-cookie")
                    headers = {"cookie": cookie.split(";", 1)[0]} if cookie else headers
            async with session.post(f"{url}/verify", json=row, headers=headers) as response:
                body = await response.read()
                status = response.status
        except aiohttp.ClientError:
            out["errors"] += 1
            continue
        if status != 200:
            out["errors"] += 1
            continue
        out["latencies"].append(time.monotonic() - began)
        reward = json.loads(body).get("reward")
        out["rewards"].setdefault(str(row_index), set()).add(reward)


async def episodes(
    session: aiohttp.ClientSession,
    url: str,
    rows: list[dict[str, Any]],
    start: int,
    deadline: float,
    out: dict[str, Any],
) -> None:
    """``rollouts`` for a Gymnasium-style environment: reset, then a step per recorded model turn."""
    index = start
    while time.monotonic() < deadline:
        row_index = index % len(rows)
        row = rows[row_index]
        index += 1
        seed = {k: v for k, v in row.items() if k != "response"}
        recorded = row.get("response") or {}
        began = time.monotonic()
        total = 0.0
        try:
            async with session.post(f"{url}/reset", json=seed) as response:
                reset = await response.json(content_type=None) if response.status == 200 else None
                cookie = response.headers.get("set-cookie")
            if reset is None:
                out["errors"] += 1
                continue
            info = reset.get("info") or {}
            headers = {"cookie": cookie.split(";", 1)[0]} if cookie else {}
            failed = False
            for number, turn in enumerate(model_turns(recorded.get("output") or [])):
                body = {**seed, "response": {**recorded, "output": turn}}
                if info.get("supports_step_idempotency") is True:
                    body["_ng_step_request_id"] = f"replay-{number}"
                async with session.post(f"{url}/step", json=body, headers=headers) as response:
                    step = await response.json(content_type=None) if response.status == 200 else None
                if not isinstance(step, dict) or not isinstance(step.get("reward"), int | float):
                    failed = True
                    break
                total += step["reward"]
                if step.get("terminated") or step.get("truncated"):
                    break
        except aiohttp.ClientError:
            out["errors"] += 1
            continue
        if failed:
            out["errors"] += 1
            continue
        out["latencies"].append(time.monotonic() - began)
        out["rewards"].setdefault(str(row_index), set()).add(total)


async def is_gymnasium(session: aiohttp.ClientSession, url: str) -> bool:
    """True when the server has no ``/verify`` route but a ``/reset`` one (a Gymnasium-style environment)."""
    async with session.post(f"{url}/verify", json={}) as response:
        if response.status != 404:
            return False
    async with session.post(f"{url}/reset", json={}) as response:
        return response.status != 404


async def probe(session: aiohttp.ClientSession, url: str, deadline: float, out: list[float]) -> None:
    while time.monotonic() < deadline:
        began = time.monotonic()
        try:
            async with session.get(f"{url}/health") as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError):  # counted as the slowest answer there is: none
            out.append(float("inf"))
        else:
            out.append(time.monotonic() - began)
        await asyncio.sleep(0.05)


async def run(url: str, rows: list[dict[str, Any]], seconds: float, concurrency: int) -> dict[str, Any]:
    out: dict[str, Any] = {"latencies": [], "rewards": {}, "errors": 0}
    health: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency + 1)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(), timeout=timeout) as s:
        one = episodes if await is_gymnasium(s, url) else rollouts
        began = time.monotonic()
        deadline = began + seconds
        await asyncio.gather(
            probe(s, url, deadline, health), *(one(s, url, rows, i, deadline, out) for i in range(concurrency))
        )
        elapsed = time.monotonic() - began
    lat = out["latencies"]
    return {
        "rollouts": len(lat),
        "errors": out["errors"],
        "seconds": elapsed,
        "rollouts_per_s": len(lat) / elapsed,
        "p50_ms": statistics.median(lat) * 1e3 if lat else float("nan"),
        "p99_ms": percentile(lat, 0.99) * 1e3,
        "max_ms": max(lat) * 1e3 if lat else float("nan"),  # bounds every child a verify waited on
        "health_p50_ms": statistics.median(health) * 1e3 if health else float("nan"),
        "health_p99_ms": percentile(health, 0.99) * 1e3,
        "health_max_ms": max(health) * 1e3 if health else float("nan"),
        "health_failed": sum(1 for seconds in health if seconds == float("inf")),
        "rewards": {k: sorted(v, key=str) for k, v in out["rewards"].items()},
    }


def main() -> None:
    url, path, seconds, concurrency = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    with open(path) as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    print(json.dumps(asyncio.run(run(url, rows, seconds, concurrency))))


if __name__ == "__main__":
    main()
