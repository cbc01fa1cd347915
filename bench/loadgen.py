"""A small closed-loop HTTP load generator for whole rollouts (aiohttp; cookies copied by hand).

Used by the benchmarks so that every server in one comparison is driven by the same tool. Run as
``python bench/loadgen.py URL ROLLOUTS_JSONL SECONDS CONCURRENCY [--close]`` → prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import aiohttp


async def rollout_loop(
    session: aiohttp.ClientSession,
    url: str,
    rollout: dict[str, Any],
    deadline: float,
    close: bool,
    counts: dict[str, Any],
) -> None:
    row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
    calls = [
        (item["name"], json.loads(item["arguments"]))
        for item in rollout["response"]["output"]
        if item.get("type") == "function_call"
    ]
    verify_body = {**row, "response": rollout["response"]}
    while time.monotonic() < deadline:
        headers: dict[str, str] = {}
        try:
            for path, body in [("seed_session", row), *calls, ("verify", verify_body)] + (
                [("close_session", {})] if close else []
            ):
                async with session.post(f"{url}/{path}", json=body, headers=headers) as response:
                    await response.read()
                    if response.status >= 400:
                        counts["errors"] += 1
                    cookie = response.headers.get("set-cookie")
                    if cookie:
                        headers = {"cookie": cookie.split(";", 1)[0]}
            counts["rollouts"] += 1
        except aiohttp.ClientError:
            counts["errors"] += 1


async def run(
    url: str, rollouts: list[dict[str, Any]], seconds: float, concurrency: int, close: bool
) -> dict[str, Any]:
    counts = {"rollouts": 0, "errors": 0}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:
        start = time.monotonic()
        deadline = start + seconds
        await asyncio.gather(
            *(
                rollout_loop(session, url, rollouts[i % len(rollouts)], deadline, close, counts)
                for i in range(concurrency)
            )
        )
        elapsed = time.monotonic() - start
    return {**counts, "seconds": elapsed, "rollouts_per_s": counts["rollouts"] / elapsed}


async def seed_and_close(url: str, row: dict[str, Any], total: int, concurrency: int) -> dict[str, Any]:
    """Seed and close ``total`` sessions (for the memory-leak measurement)."""
    done = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while done < total:
            done += 1
            async with session.post(f"{url}/seed_session", json=row) as response:
                await response.read()
                cookie = response.headers["set-cookie"].split(";", 1)[0]
            async with session.post(f"{url}/close_session", json={}, headers={"cookie": cookie}) as response:
                await response.read()

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return {"sessions": done}


def main() -> None:
    url, path, seconds, concurrency = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    with open(path) as lines:
        rollouts = [json.loads(line) for line in lines if line.strip()]
    if "--seed-close" in sys.argv:
        result = asyncio.run(seed_and_close(url, rollouts[0], int(seconds), concurrency))
    else:
        result = asyncio.run(run(url, rollouts, seconds, concurrency, "--close" in sys.argv))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
