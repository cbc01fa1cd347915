"""Protocol fronts against NeMo Gym's wire: the same environments, the same recorded rollouts, side by side in one run.

Each environment (weather = example_single_tool_call, and workplace_assistant) is served once by ``ngym run`` (one
process); every protocol's driver replays the environment's recorded example rollouts against that same server
(NeMo Gym's wire: seed → the recorded tool calls → verify with the recorded response; ORS: the ``openreward``
SDK's request sequence for one rollout, made with plain httpx: ``/create_session`` → ``/create`` → ``/prompt`` →
the recorded tool calls over ``/call`` → ``submit_answer`` with the recorded final message → ``/delete``; floor:
NeMo Gym's rollout plus three requests to the emptiest route, ORS's three extra requests at no cost of their own).
Rounds alternate between protocols; per round: rollouts/s (``--concurrency`` rollouts in flight, the client in
this process) and the server's CPU per rollout (its process's CPU time over the round, from ``/proc``). Every
reward is checked against the recording (a mismatch stops the run). Printed: medians, and each front's ratio to
NeMo Gym's wire (CPU per rollout: above 1.0 is what the front costs).

A protocol is one ``Driver`` (its ``name`` and ``rollout``): add it to ``DRIVERS`` and pass ``--protocols``.

    .venv/bin/python bench/bench_fronts.py [--seconds 4] [--rounds 3] [--concurrency 8] [--protocols nemo,ors,floor]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ngym.child_server import free_port, stop_process, wait_healthy  # noqa: E402
from ngym.examples import dataset_row, read_example_rollouts, read_jsonl, recorded_tool_calls  # noqa: E402

ENVIRONMENTS = ("example_single_tool_call", "workplace_assistant")


class Driver(Protocol):
    """One protocol's client for one rollout: replays a recorded rollout, returns the reward it got."""

    name: str

    async def rollout(self, http: httpx.AsyncClient, index: int, recorded: dict[str, Any]) -> float | None: ...


def final_text(response: dict[str, Any]) -> str:
    messages = [item for item in response["output"] if item.get("type") == "message"]
    return "".join(part.get("text", "") for part in messages[-1]["content"]) if messages else ""


class NemoWire:
    """NeMo Gym's agent: seed with the row, each recorded tool call, verify with the recorded response (cookie
    copied by hand)."""

    name = "nemo"

    async def rollout(self, http: httpx.AsyncClient, index: int, recorded: dict[str, Any]) -> float | None:
        row = dataset_row(recorded)
        seeded = await http.post("/seed_session", json=row)
        cookie = {"cookie": seeded.headers["set-cookie"].split(";", 1)[0]}
        for call in recorded_tool_calls(recorded["response"]):
            await http.post(f"/{call.name}", json=call.arguments, headers=cookie)
        verified = await http.post("/verify", json={**row, "response": recorded["response"]}, headers=cookie)
        reward: float | None = verified.json()["reward"]
        return reward


def sse_answer(text: str) -> Any:
    """The JSON answer of an ORS event stream: its chunk and end events' data joined."""
    data = []
    for block in text.split("\r\n\r\n"):
        lines = block.split("\r\n")
        if lines and lines[0] in ("event: chunk", "event: end"):
            data.append("\n".join(line[6:] for line in lines[1:] if line.startswith("data: ")))
    return json.loads("".join(data)) if data else None


class ORSWire:
    """The ``openreward`` SDK's requests for one rollout (pings aside: one per 10 s of a session)."""

    name = "ors"

    def __init__(self, prefix: str = "/ors") -> None:
        self.prefix = prefix

    async def rollout(self, http: httpx.AsyncClient, index: int, recorded: dict[str, Any]) -> float | None:
        p = self.prefix
        opened = await http.post(f"{p}/create_session", headers={"accept": "text/event-stream"})
        sid = {"x-session-id": opened.text.split("\r\n")[1][6:]}
        created = await http.post(f"{p}/create", json={"split": "example", "index": index}, headers=sid)
        assert created.status_code == 200, created.text
        await http.get(f"{p}/prompt", headers=sid)
        for call in recorded_tool_calls(recorded["response"]):
            await http.post(f"{p}/call", json={"name": call.name, "input": call.arguments}, headers=sid)
        answer = {"name": "submit_answer", "input": {"answer": final_text(recorded["response"])}}
        submitted = sse_answer((await http.post(f"{p}/call", json=answer, headers=sid)).text)
        await http.post(f"{p}/delete", headers=sid)
        reward: float | None = submitted["output"]["reward"]
        return reward


class Floor(NemoWire):
    """NeMo Gym's rollout plus the three requests ORS adds to it (``/create_session``, ``/prompt``, ``/delete``),
    each made to the server's emptiest route (``GET /livez``): what ORS costs at the least, whatever its front does."""

    name = "floor"

    async def rollout(self, http: httpx.AsyncClient, index: int, recorded: dict[str, Any]) -> float | None:
        for _ in range(3):
            await http.get("/livez")
        return await super().rollout(http, index, recorded)


DRIVERS: dict[str, Callable[[], Driver]] = {"nemo": NemoWire, "ors": ORSWire, "floor": Floor}


def process_cpu(pid: int) -> float:
    """CPU seconds of a process and its children (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def start(environment: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "ngym.cli", "run", environment, "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, 120, path="/")
    return proc, url


async def one_round(
    url: str,
    pid: int,
    driver: Driver,
    rollouts: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    seconds: float,
    concurrency: int,
) -> tuple[float, float, float]:
    """``concurrency`` loops replaying rollouts for ``seconds``: (rollouts/s, server CPU ms per rollout, HTTP
    requests per rollout)."""
    indexes = [rows.index(dataset_row(r)) for r in rollouts]
    done = requests = 0

    async def count(request: httpx.Request) -> None:
        nonlocal requests
        requests += 1

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    hooks = {"request": [count]}
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits, event_hooks=hooks) as http:
        await driver.rollout(http, indexes[0], rollouts[0])  # warm: the first request of a front imports it
        requests = 0
        cpu_before, began = process_cpu(pid), time.monotonic()
        deadline = began + seconds

        async def loop(offset: int) -> None:
            nonlocal done
            k = offset
            while time.monotonic() < deadline:
                recorded = rollouts[k % len(rollouts)]
                reward = await driver.rollout(http, indexes[k % len(rollouts)], recorded)
                if reward != recorded["reward"]:
                    raise SystemExit(
                        f"{driver.name}: rollout {k % len(rollouts)} got {reward}, recorded {recorded['reward']}"
                    )
                done += 1
                k += 1

        await asyncio.gather(*(loop(i) for i in range(concurrency)))
        elapsed, cpu = time.monotonic() - began, process_cpu(pid) - cpu_before
    return done / elapsed, 1000 * cpu / max(done, 1), requests / max(done, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    protocols = f"comma-separated, from {sorted(DRIVERS)}; nemo first"
    parser.add_argument("--protocols", default="nemo,ors,floor", help=protocols)
    parser.add_argument("--environments", default=",".join(ENVIRONMENTS))
    args = parser.parse_args()
    drivers = [DRIVERS[name]() for name in args.protocols.split(",")]
    base = drivers[0].name
    print("| environment | protocol | HTTP requests/rollout | rollouts/s | server CPU ms/rollout |"
          f" vs {base}: rollouts/s | vs {base}: CPU/rollout | vs {base}: CPU/request |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for environment in args.environments.split(","):
        folder = ROOT / "resources_servers" / environment / "data"
        rollouts = read_example_rollouts(folder / "example_rollouts.jsonl")
        rows = read_jsonl(folder / "example.jsonl")
        proc, url = start(environment)
        try:
            results: dict[str, list[tuple[float, float, float]]] = {d.name: [] for d in drivers}
            for _ in range(args.rounds):
                for driver in drivers:
                    results[driver.name].append(
                        asyncio.run(one_round(url, proc.pid, driver, rollouts, rows, args.seconds, args.concurrency))
                    )
        finally:
            stop_process(proc)
        base_rate = statistics.median(r for r, _, _ in results[base])
        base_cpu = statistics.median(c for _, c, _ in results[base])
        base_requests = results[base][0][2]
        for driver in drivers:
            rate = statistics.median(r for r, _, _ in results[driver.name])
            cpu = statistics.median(c for _, c, _ in results[driver.name])
            requests = results[driver.name][0][2]
            per_request = (cpu / requests) / (base_cpu / base_requests)
            print(f"| {environment} | {driver.name} | {requests:.1f} | {rate:.0f} | {cpu:.2f} |"
                  f" {rate / base_rate:.2f}x | {cpu / base_cpu:.2f}x | {per_request:.2f}x |")  # fmt: skip


if __name__ == "__main__":
    main()
