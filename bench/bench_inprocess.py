"""bench_core.py's comparison without sockets: ngym's and the bare app's server CPU per rollout, in one process.

Each app sits behind the uvicorn HTTP protocol it is served with (ngym: ``ngym.server.hosting.host.uvicorn_config``,
with its header-deadline protocol; bare: uvicorn's defaults, as ``uvicorn bench.bare_weather_app:app`` runs it), fed
raw HTTP/1.1 requests through an in-memory transport: httptools parsing, every middleware, FastAPI, the response
bytes; no kernel, no client process. Rollouts are bench_core's (seed -> get_weather -> verify, the cookie copied as
wrk does). Short rounds alternate between the apps, so the machine's load hits both alike; the CPU time
(``time.process_time``) of each round is compared as a ratio, and also split per route.

A quicker, steadier loop than bench_core.py on a shared machine when looking for per-request costs (a
profiler can attach to it: ``py-spy record -- python bench/bench_inprocess.py --only ngym``); bench_core.py
remains the measurement that counts.

    .venv/bin/python bench/bench_inprocess.py [--rollouts 500] [--rounds 10] [--only ngym|bare]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.server import ServerState

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # bench.bare_weather_app, when run as a script

from ngym.testing.memory_transport import MemoryTransport  # noqa: E402

ROLLOUTS = ROOT / "resources_servers/example_single_tool_call/data/example_rollouts.jsonl"
WEATHER = "resources_servers.example_single_tool_call.app:WeatherResourcesServer"
_SET_COOKIE = re.compile(rb"\r\nset-cookie: ([^;\r]+)", re.IGNORECASE)


def plan() -> list[tuple[str, bytes]]:
    """The weather example's first recorded rollout as (path, body) requests, as bench_core.write_plan."""
    rollout = json.loads(ROLLOUTS.read_text().splitlines()[0])
    row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
    steps: list[tuple[str, Any]] = [("/seed_session", row)]
    steps += [
        (f"/{item['name']}", json.loads(item["arguments"]))
        for item in rollout["response"]["output"]
        if item.get("type") == "function_call"
    ]
    steps.append(("/verify", {**row, "response": rollout["response"]}))
    return [(path, json.dumps(body).encode()) for path, body in steps]


def config(kind: str) -> uvicorn.Config:
    """The uvicorn config each app is served with (loaded: middleware and protocol class resolved)."""
    if kind == "bare":
        from bench.bare_weather_app import app

        cfg = uvicorn.Config(app, log_level="warning", access_log=False)
    else:
        from ngym.server.hosting.host import uvicorn_config
        from ngym.server.pipeline.app import ServeSpec, build_app, build_server

        server = build_server(ServeSpec(target=WEATHER, name="example_single_tool_call"))
        cfg = uvicorn_config(server, build_app(server, app_plugins=False), access_log=False, lifespan="on")
    cfg.load()
    return cfg


async def rollouts(cfg: uvicorn.Config, state: ServerState, steps: list[tuple[str, bytes]], n: int) -> dict[str, float]:
    """Run ``n`` rollouts over 8 keep-alive connections; CPU seconds spent per route."""
    loop = asyncio.get_running_loop()
    connections: list[tuple[Any, MemoryTransport]] = []
    for _ in range(8):
        # uvicorn's HTTP protocol class (typed as asyncio's Protocol): its own constructor and ``cycle``
        protocol_class: Any = cfg.http_protocol_class
        protocol = protocol_class(config=cfg, server_state=state, app_state={}, _loop=loop)
        transport = MemoryTransport()
        protocol.connection_made(transport)
        connections.append((protocol, transport))
    per_route = dict.fromkeys((path for path, _ in steps), 0.0)
    for i in range(n):
        protocol, transport = connections[i % len(connections)]
        cookie = b""
        for j, (path, body) in enumerate(steps):
            head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n".encode()
            if cookie and j > 0:
                head += b"Cookie: " + cookie + b"\r\n"
            head += b"Content-Length: %d\r\n\r\n" % len(body)
            transport.written.clear()
            began = time.process_time()
            protocol.data_received(head + body)
            while not protocol.cycle.response_complete:
                await asyncio.sleep(0)
            per_route[path] += time.process_time() - began
            response = bytes(transport.written)
            if not response.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"{path}: {response[:300]!r}")
            found = _SET_COOKIE.search(response)
            if found:
                cookie = found.group(1)
    for protocol, _ in connections:
        protocol.connection_lost(None)
    return per_route


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rollouts", type=int, default=500, help="rollouts per round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--only", choices=("ngym", "bare"))
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["ngym", "bare"]
    steps = plan()
    configs = {kind: config(kind) for kind in kinds}
    state = ServerState()
    for cfg in configs.values():
        await rollouts(cfg, state, steps, 200)  # warm-up
    total: dict[str, list[float]] = {kind: [] for kind in kinds}
    routes: dict[str, dict[str, list[float]]] = {kind: {} for kind in kinds}
    for _ in range(args.rounds):
        for kind, cfg in configs.items():
            gc.collect()
            began = time.process_time()
            per_route = await rollouts(cfg, state, steps, args.rollouts)
            total[kind].append((time.process_time() - began) / args.rollouts * 1e6)
            for path, seconds in per_route.items():
                routes[kind].setdefault(path, []).append(seconds / args.rollouts * 1e6)
    for kind in kinds:
        split = ", ".join(f"{path} {statistics.median(v):.0f}" for path, v in routes[kind].items())
        print(f"{kind:5s} server CPU us/rollout: median {statistics.median(total[kind]):.0f}  ({split})")
    if len(kinds) == 2:
        ratios = [b / n for n, b in zip(total["ngym"], total["bare"], strict=True)]
        print(
            f"ratio by server CPU per rollout (bare / ngym): median of {len(ratios)} rounds "
            f"{statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})"
        )


if __name__ == "__main__":
    try:
        import uvloop
    except ImportError:  # uvicorn's default loop without it
        asyncio.run(main())
    else:
        uvloop.run(main())
