"""Issue 22's workers scale: the counter environment (example_session_state_mgmt: CPU-bound in the server, every
request parsed, validated, its state read and written in Python) at ``ngym run --workers 2`` vs ``--workers 1``,
side by side in one run. (The weather example keeps no declared session state, so it cannot use a shared store.)

Sessions live in a real ``redis-server`` (its own port and folder) for both, so the two differ only in the number
of worker processes. wrk (bench/rollout.lua: whole rollouts, cookie copied by hand) is pinned to CPU 1 with
``taskset``; the servers are not pinned (2 workers must be free to use both cores). Rounds alternate; the ratio
of medians is printed with what every process used: the workers' CPU, and wrk's own, because on a 2-core machine
wrk's core is one of the two the workers would need.

    .venv/bin/python bench/bench_workers.py [--seconds 4] [--rounds 5] [--connections 32]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_core import pinned, write_plan  # noqa: E402
from ngym.child_server import free_port, stop_process, wait_healthy  # noqa: E402

ENVIRONMENT = "example_session_state_mgmt"
ROLLOUTS = ROOT / "resources_servers" / ENVIRONMENT / "data" / "example_rollouts.jsonl"


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants (uvicorn's supervisor and its workers)."""
    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
    return total


def start(workers: int, redis_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "NGYM_SESSION_STORE": redis_url, "NGYM_SESSION_SECRET": "bench-workers"}
    cmd = [sys.executable, "-m", "ngym.cli", "run", ENVIRONMENT, "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--workers", str(workers)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, 120, path="/")
    return proc, url


def wrk(
    url: str, server_pid: int, redis_pid: int, plan: Path, steps: int, seconds: float, connections: int
) -> dict[str, float]:
    cmd = pinned(1, ["wrk", f"-t{connections}", f"-c{connections}", f"-d{seconds:.0f}s", "-s",
                     str(ROOT / "bench/rollout.lua"), url, "--", str(plan)])  # fmt: skip
    server_before, redis_before, began = tree_cpu(server_pid), tree_cpu(redis_pid), time.monotonic()
    usage_before = os.times()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    usage = os.times()
    elapsed = time.monotonic() - began
    wrk_cpu = (usage.children_user + usage.children_system) - (
        usage_before.children_user + usage_before.children_system
    )
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rollouts_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)) / steps,  # type: ignore[union-attr]
        "server_cores": (tree_cpu(server_pid) - server_before) / elapsed,
        "wrk_cores": wrk_cpu / elapsed,
        "redis_cores": (tree_cpu(redis_pid) - redis_before) / elapsed,
        "load_average": os.getloadavg()[0],
        "errors": int(bad.group(1)) if bad else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench_workers needs wrk (Debian package 'wrk'): apt-get install -y wrk")
    from ngym_redis.testing import RedisServer

    results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="i22-bench-workers-") as scratch:
        redis = RedisServer.start(Path(scratch) / "redis")
        assert redis.process is not None
        redis_pid = redis.process.pid
        servers = {}
        try:
            servers = {n: start(n, redis.url) for n in (1, 2)}
            plan = Path(scratch) / "plan.tsv"
            steps = write_plan(plan, ROLLOUTS)
            for proc, url in servers.values():
                wrk(url, proc.pid, redis_pid, plan, steps, 2, args.connections)  # warm-up
            for _ in range(args.rounds):
                for n, (proc, url) in servers.items():
                    results[n].append(wrk(url, proc.pid, redis_pid, plan, steps, args.seconds, args.connections))
        finally:
            for proc, _ in servers.values():
                stop_process(proc)
            redis.stop()
    print(f"machine: {os.cpu_count()} cores, shared with other users (load average {os.getloadavg()[0]:.1f}); "
          f"wrk pinned to CPU 1, servers free; sessions in redis-server; {args.rounds} alternating rounds of "
          f"{args.seconds:.0f}s, {args.connections} connections")  # fmt: skip
    print(
        "| workers | rollouts/s (median) | server cores used | redis cores | wrk cores | load average | non-2xx |"
        "\n|---|---|---|---|---|---|---|"
    )
    for n, rounds in results.items():
        keys = ("rollouts_per_s", "server_cores", "redis_cores", "wrk_cores", "load_average")
        med = {k: statistics.median(r[k] for r in rounds) for k in keys}
        errors = sum(int(r["errors"]) for r in rounds)
        print(
            f"| {n} | {med['rollouts_per_s']:.0f} | {med['server_cores']:.2f} | {med['redis_cores']:.2f} | "
            f"{med['wrk_cores']:.2f} | {med['load_average']:.1f} | {errors} |"
        )
    ratios = [b["rollouts_per_s"] / a["rollouts_per_s"] for a, b in zip(results[1], results[2], strict=True)]
    print(f"2 workers / 1 worker: median {statistics.median(ratios):.2f}x (pairs {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
