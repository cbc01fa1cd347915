"""OpenEnv's protocol (``/openenv``) against NeMo Gym's wire on the same server: rollouts/s and server CPU/rollout.

    .venv/bin/python bench/bench_openenv_front.py [--rollouts 300] [--concurrency 8] [--rounds 3]

For each environment (weather = example_single_tool_call, workplace_assistant), one ``ngym run`` process serves
both wires; its recorded rollouts are replayed in turn, ``--rounds`` times alternating the two sides so both
see the same machine:

- NeMo Gym's wire: ``/seed_session`` → each recorded tool call → ``/verify`` with the recorded response
  (httpx, the session cookie carried by hand, as NeMo Gym's agent does);
- OpenEnv's protocol: a WebSocket to ``/openenv/ws`` per concurrent client, reused across episodes (as an OpenEnv
  client is): ``reset`` with the row → ``step`` per tool call → ``step`` with the final answer (which verifies).

Printed per environment: rollouts/s and the server's CPU seconds per rollout of each side (best round), and
the ratio OpenEnv/NeMo (CPU: > 1 is the front's cost). Every rollout's reward is checked against the recorded one.
Also: the JSON work the protocol moves from the agent into the server, timed alone (``moved_json_ms``), and the
CPU ratio NeMo's rollout plus that work alone would have (the floor).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pydantic_core
import websockets

from ngym.child_server import LOOPBACK, free_port, start_environment, stop_process, wait_healthy
from ngym.examples import dataset_row, read_example_rollouts, recorded_tool_calls
from ngym.server.protocol import Response
from ngym.targets import resolve

ENVIRONMENTS = {"weather": "example_single_tool_call", "workplace_assistant": "workplace_assistant"}


def plan(name: str) -> list[dict[str, Any]]:
    folder = resolve(name).folder
    assert folder is not None
    rollouts = read_example_rollouts(folder / "data" / "example_rollouts.jsonl")
    return [
        {
            "row": dataset_row(r),
            "calls": [(c.name, c.arguments) for c in recorded_tool_calls(r["response"])],
            "final": Response.model_validate(r["response"]).final_text(),
            "response": r["response"],
            "reward": r["reward"],
        }
        for r in rollouts
    ]


async def nemo_rollout(http: httpx.AsyncClient, item: dict[str, Any]) -> Any:
    seed = await http.post("/seed_session", json=item["row"])
    cookie = {"cookie": seed.headers["set-cookie"].split(";", 1)[0]}
    for name, arguments in item["calls"]:
        await http.post(f"/{name}", json=arguments, headers=cookie)
    verified = await http.post("/verify", json={**item["row"], "response": item["response"]}, headers=cookie)
    return verified.json()["reward"]


class OpenEnvConnection:
    """One WebSocket to ``/openenv/ws``, reset for every episode (as an OpenEnv client is reused)."""

    def __init__(self, ws_url: str) -> None:
        self.ws_url = ws_url
        self.socket: Any = None

    async def send(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.socket is None:
            self.socket = await websockets.connect(self.ws_url, max_size=None)
        await self.socket.send(json.dumps(message))
        answer: dict[str, Any] = json.loads(await self.socket.recv())
        assert answer["type"] != "error", answer
        return answer

    async def rollout(self, item: dict[str, Any]) -> Any:
        await self.send({"type": "reset", "data": {"row": item["row"]}})
        for name, arguments in item["calls"]:
            await self.send({"type": "step", "data": {"tool_name": name, "arguments": arguments}})
        final = await self.send({"type": "step", "data": {"message": item["final"]}})
        return final["data"]["reward"]

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()


def cpu_seconds(pid: int) -> float:
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


async def run_side(side: str, url: str, items: list[dict[str, Any]], total: int, concurrency: int) -> list[Any]:
    queue = [items[i % len(items)] for i in range(total)]
    rewards: list[Any] = [None] * total
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        ws_url = url.replace("http://", "ws://") + "/openenv/ws"
        position = 0

        async def worker() -> None:
            nonlocal position
            connection = OpenEnvConnection(ws_url)
            while position < total:
                index = position
                position += 1
                item = queue[index]
                rewards[index] = await (nemo_rollout(http, item) if side == "nemo" else connection.rollout(item))
            await connection.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return rewards


def moved_json_ms(items: list[dict[str, Any]], repeat: int = 200) -> float:
    """CPU ms per rollout of the JSON work OpenEnv's protocol moves into the server, timed alone in this process:
    the row parsed from the reset message (the seed route parses it again), encoded for the seed, the row's tool
    declarations encoded into the reset's observation, the trajectory encoded into the verify body and verify's
    answer (which echoes row and trajectory) parsed. Over NeMo Gym's wire the agent does these on its side."""
    work = []
    for item in items:
        row, response = item["row"], item["response"]
        message = pydantic_core.to_json({"type": "reset", "data": {"row": row}})
        answer = pydantic_core.to_json({**row, "response": response, "reward": item["reward"]})
        tools = (row.get("responses_create_params") or {}).get("tools") or []
        work.append((message, row, tools, response, answer))
    started = time.process_time()
    for _ in range(repeat):
        for message, row, tools, response, answer in work:
            pydantic_core.from_json(message)
            pydantic_core.to_json(row)
            pydantic_core.to_json(tools)
            pydantic_core.to_json(response)
            pydantic_core.from_json(answer)
    return 1000 * (time.process_time() - started) / (repeat * len(work))


def bench(label: str, name: str, total: int, concurrency: int, rounds: int) -> dict[str, Any]:
    items = plan(name)
    expected = [items[i % len(items)]["reward"] for i in range(total)]
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    process = start_environment(name, port=port, overrides=[], log=Path(f"/tmp/bench_openenv_{name}.log"))
    best: dict[str, tuple[float, float]] = {}
    try:
        wait_healthy(url, process, 120)
        asyncio.run(run_side("openenv", url, items, min(total, 20), concurrency))  # warm both paths up
        asyncio.run(run_side("nemo", url, items, min(total, 20), concurrency))
        for _ in range(rounds):
            for side in ("nemo", "openenv"):
                cpu, started = cpu_seconds(process.pid), time.perf_counter()
                rewards = asyncio.run(run_side(side, url, items, total, concurrency))
                wall, used = time.perf_counter() - started, cpu_seconds(process.pid) - cpu
                if rewards != expected:
                    raise SystemExit(f"{label} {side}: rewards differ from the recorded ones")
                rate, per = total / wall, used / total
                if side not in best or rate > best[side][0]:
                    best[side] = (rate, per)
        live = httpx.get(f"{url}/health").json()["live_sessions"]
    finally:
        stop_process(process)
    (nemo_rate, nemo_cpu), (oe_rate, oe_cpu) = best["nemo"], best["openenv"]
    moved = moved_json_ms(items)
    return {
        "environment": label,
        "nemo_rollouts_per_s": round(nemo_rate, 1),
        "openenv_rollouts_per_s": round(oe_rate, 1),
        "nemo_cpu_ms_per_rollout": round(nemo_cpu * 1000, 2),
        "openenv_cpu_ms_per_rollout": round(oe_cpu * 1000, 2),
        "throughput_ratio": round(oe_rate / nemo_rate, 3),
        "cpu_ratio": round(oe_cpu / nemo_cpu, 3),
        "moved_json_ms_per_rollout": round(moved, 2),
        "floor_cpu_ratio": round((nemo_cpu * 1000 + moved) / (nemo_cpu * 1000), 3),
        "live_sessions_after": live,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [bench(label, name, args.rollouts, args.concurrency, args.rounds) for label, name in ENVIRONMENTS.items()]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        "| environment | NeMo wire rollouts/s | OpenEnv rollouts/s | ratio "
        "| NeMo CPU ms/rollout | OpenEnv CPU ms/rollout | CPU ratio | JSON moved ms/rollout | floor CPU ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['environment']} | {r['nemo_rollouts_per_s']} | {r['openenv_rollouts_per_s']} "
            f"| {r['throughput_ratio']}x | {r['nemo_cpu_ms_per_rollout']} | {r['openenv_cpu_ms_per_rollout']} "
            f"| {r['cpu_ratio']}x | {r['moved_json_ms_per_rollout']} | {r['floor_cpu_ratio']}x |"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
