"""Issue 2's benchmark: the weather environment under ngym vs a bare FastAPI app, side by side in one run.

Both servers run one uvicorn worker pinned to CPU 0; wrk (bench/rollout.lua: closed loop, whole rollouts
seed → get_weather → verify, the cookie copied by hand) runs pinned to CPU 1. wrk rather than a Python
client, because a Python client on one core saturates before the server does (and pays for parsing
ngym's Set-Cookie headers, which the bare app does not send), so it would measure itself.
Rounds alternate (ngym, bare, ngym, bare, ...) and the medians are compared as a ratio. Also measured:
cold start (spawn → first 200 on GET /docs; median of 5 after one warm-up start each), idle RSS, and RSS
after 100k sessions seeded and closed (those with bench/loadgen.py).

    .venv/bin/python bench/bench_core.py [--seconds 3] [--rounds 8] [--concurrency 32] [--sessions 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from ngym.child_server import free_port, stop_process, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
ROLLOUTS = ROOT / "resources_servers/example_single_tool_call/data/example_rollouts.jsonl"


def pinned(cpu: int, cmd: list[str]) -> list[str]:
    multi_core = shutil.which("taskset") and (os.cpu_count() or 1) > 1
    return ["taskset", "-c", str(cpu), *cmd] if multi_core else cmd


def start(kind: str) -> tuple[subprocess.Popen[bytes], str, float]:
    port = free_port()
    if kind == "ngym":
        cmd = [PY, "-m", "ngym.cli", "run", "example_single_tool_call", "--port", str(port)]
    else:
        cmd = [
            PY,
            "-m",
            "uvicorn",
            "bench.bare_weather_app:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ]
    # Bytecode caching on, as in any deployment (pip compiles at install; a checkout writes __pycache__ on
    # first import): a shell with PYTHONDONTWRITEBYTECODE=1 would make every start recompile ngym's sources
    # and measure the compiler. The first start of each kind (a warm-up, not counted) writes the cache.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    began = time.perf_counter()
    proc = subprocess.Popen(pinned(0, cmd), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, 60, path="/docs", interval=0.005)
    return proc, url, time.perf_counter() - began


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_plan(path: Path, rollouts: Path = ROLLOUTS) -> int:
    """The first recorded rollout of ``rollouts`` (default: the weather example's) as wrk's request plan (seed,
    tool calls, verify); the number of requests."""
    rollout = json.loads(rollouts.read_text().splitlines()[0])
    row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
    steps = [("/seed_session", row)]
    steps += [
        (f"/{item['name']}", json.loads(item["arguments"]))
        for item in rollout["response"]["output"]
        if item.get("type") == "function_call"
    ]
    steps.append(("/verify", {**row, "response": rollout["response"]}))
    path.write_text("".join(f"{route}\t{json.dumps(body)}\n" for route, body in steps))
    return len(steps)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _found(pattern: str, text: str) -> str:
    """The first group of ``pattern`` in ``text`` (wrk's summary); RuntimeError naming what is missing."""
    match = re.search(pattern, text)
    if match is None:
        raise RuntimeError(f"wrk's output has no {pattern!r}: {text[-500:]}")
    return match.group(1)


def wrk_rollouts(url: str, server_pid: int, plan: Path, steps: int, seconds: float, connections: int) -> dict[str, Any]:
    """Closed-loop whole rollouts with wrk (one connection per thread); rollouts/s and server CPU share."""
    cmd = pinned(
        1,
        [
            "wrk",
            f"-t{connections}",
            f"-c{connections}",
            f"-d{seconds:.0f}s",
            "-s",
            str(ROOT / "bench/rollout.lua"),
            url,
            "--",
            str(plan),
        ],
    )
    cpu_before, began = cpu_seconds(server_pid), time.monotonic()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    elapsed, cpu_used = time.monotonic() - began, cpu_seconds(server_pid) - cpu_before
    requests = int(_found(r"(\d+) requests in", out))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    rollouts = requests / steps
    return {
        "rollouts_per_s": float(_found(r"Requests/sec:\s+([\d.]+)", out)) / steps,
        "errors": int(bad.group(1)) if bad else 0,
        "server_cpu": cpu_used / elapsed,
        # Server CPU time per rollout: steadier than wall-clock throughput on a shared (virtual) machine.
        "cpu_us_per_rollout": cpu_used / rollouts * 1e6 if rollouts else float("nan"),
    }


def load(url: str, seconds: float, concurrency: int, extra: list[str] | None = None) -> dict[str, Any]:
    cmd = pinned(
        1, [PY, str(ROOT / "bench/loadgen.py"), url, str(ROLLOUTS), str(seconds), str(concurrency), *(extra or [])]
    )
    measured: dict[str, Any] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args()

    if shutil.which("wrk") is None:
        sys.exit("bench_core needs wrk (Debian package 'wrk'): apt-get install -y wrk")
    cold: dict[str, list[float]] = {"ngym": [], "bare": []}
    idle: dict[str, list[float]] = {"ngym": [], "bare": []}
    for kind in ("ngym", "bare"):  # warm-up: __pycache__ written, page cache hot
        stop_process(start(kind)[0])
    for _ in range(5):
        for kind in ("ngym", "bare"):
            proc, url, started_in = start(kind)
            cold[kind].append(started_in)
            idle[kind].append(rss_mb(proc.pid))
            stop_process(proc)

    # Both servers up at once (each idles while the other is loaded); short runs alternate, so the two runs
    # of a pair see the same machine. The ratio of each pair is what is compared; its median is reported.
    throughput: dict[str, list[float]] = {"ngym": [], "bare": []}
    server_cpu: dict[str, list[float]] = {"ngym": [], "bare": []}
    cpu_per_rollout: dict[str, list[float]] = {"ngym": [], "bare": []}
    errors = {"ngym": 0, "bare": 0}
    servers = {kind: start(kind)[:2] for kind in ("ngym", "bare")}
    try:
        with tempfile.TemporaryDirectory() as scratch:
            plan = Path(scratch) / "plan.tsv"
            steps = write_plan(plan)
            for proc, url in servers.values():
                wrk_rollouts(url, proc.pid, plan, steps, 2, args.concurrency)  # warm-up
            for _ in range(args.rounds):
                for kind, (proc, url) in servers.items():
                    result = wrk_rollouts(url, proc.pid, plan, steps, args.seconds, args.concurrency)
                    throughput[kind].append(result["rollouts_per_s"])
                    server_cpu[kind].append(result["server_cpu"])
                    cpu_per_rollout[kind].append(result["cpu_us_per_rollout"])
                    errors[kind] += result["errors"]
    finally:
        for proc, _ in servers.values():
            stop_process(proc)
    ratios = [n / b for n, b in zip(throughput["ngym"], throughput["bare"], strict=True)]
    cpu_ratios = [b / n for n, b in zip(cpu_per_rollout["ngym"], cpu_per_rollout["bare"], strict=True)]

    proc, url, _ = start("ngym")
    load(url, 2000, 32, ["--seed-close"])  # warm-up: allocator pools, caches
    before = rss_mb(proc.pid)
    load(url, args.sessions, 32, ["--seed-close"])
    after = rss_mb(proc.pid)
    live = httpx.get(url + "/health").json()["live_sessions"]
    stop_process(proc)

    med = {k: statistics.median(v) for k, v in throughput.items()}
    print("per round:", {k: [round(x) for x in v] for k, v in throughput.items()})
    print(
        f"machine: {os.cpu_count()} cores; server on CPU 0, wrk (bench/rollout.lua) on CPU 1; "
        f"{args.rounds} alternating pairs of {args.seconds:.0f}s runs, {args.concurrency} concurrent rollouts"
    )
    print(f"{'':24s}{'ngym':>12s}{'bare FastAPI':>14s}")
    print(f"{'rollouts/s (median)':24s}{med['ngym']:12.0f}{med['bare']:14.0f}")
    cold_ngym, cold_bare = statistics.median(cold["ngym"]), statistics.median(cold["bare"])
    print(f"{'cold start s (median)':24s}{cold_ngym:12.3f}{cold_bare:14.3f}")
    print(f"{'idle RSS MB (median)':24s}{statistics.median(idle['ngym']):12.1f}{statistics.median(idle['bare']):14.1f}")
    cpu_ngym, cpu_bare = statistics.median(server_cpu["ngym"]), statistics.median(server_cpu["bare"])
    print(f"{'server CPU (median)':24s}{cpu_ngym:12.0%}{cpu_bare:14.0%}")
    cpu_n, cpu_b = statistics.median(cpu_per_rollout["ngym"]), statistics.median(cpu_per_rollout["bare"])
    print(f"{'server CPU us/rollout':24s}{cpu_n:12.0f}{cpu_b:14.0f}")
    print(f"{'non-2xx responses':24s}{errors['ngym']:12d}{errors['bare']:14d}")
    print(
        f"ratio ngym / bare FastAPI rollouts/s: median of {len(ratios)} paired runs {statistics.median(ratios):.2f}x "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}; target >= 1.0x)"
    )
    print(
        f"ratio by server CPU per rollout (bare / ngym): median {statistics.median(cpu_ratios):.2f}x "
        f"(min {min(cpu_ratios):.2f}, max {max(cpu_ratios):.2f})"
    )
    print(
        f"RSS after {args.sessions} sessions seeded+closed: {before:.1f} MB -> {after:.1f} MB "
        f"(+{after - before:.1f} MB), live sessions {live}"
    )


if __name__ == "__main__":
    main()
