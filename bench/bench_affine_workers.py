"""``ngym run NAME --workers N`` for stateful environments: rollouts/s and CPU per rollout, direct vs HAProxy.

For each environment (the counter, whose state is in the process, and math_with_code, a live sandbox per rollout),
three servers are measured side by side, alternating, ROUNDS times:

- ``direct 1``: ``ngym run NAME`` (one process, no proxy);
- ``proxy 1``: the same single worker behind ngym's HAProxy (``ngym.server.hosting.affinity`` with one worker): the
  routing layer's own cost, as a ratio to ``direct 1``;
- ``proxy 2``: ``ngym run NAME --workers 2`` (two workers behind HAProxy).

The load generator (``bench/loadgen.py``: whole recorded rollouts, cookies copied by hand, CONCURRENCY in flight)
is pinned to the last core with ``taskset``; the servers are not pinned. CPU per rollout is the CPU time of every
process of the server (supervisor, workers, HAProxy, sandboxes) during the measured run over the rollouts it
finished. On a 2-core machine the load generator takes one core, so two workers cannot double rollouts/s; CPU per
rollout is the number that says whether a second worker costs anything.

    .venv/bin/python bench/bench_affine_workers.py     # ~2 min; NGYM_BENCH_SECONDS=5 NGYM_BENCH_ROUNDS=2
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from ngym.child_server import free_port, start_environment, stop_process, wait_healthy
from ngym.targets import resolve

SECONDS = float(os.environ.get("NGYM_BENCH_SECONDS", "5"))
ROUNDS = int(os.environ.get("NGYM_BENCH_ROUNDS", "2"))
CONCURRENCY = int(os.environ.get("NGYM_BENCH_CONCURRENCY", "16"))
ENVIRONMENTS = os.environ.get("NGYM_BENCH_ENVS", "example_session_state_mgmt,math_with_code").split(",")
LOADGEN = Path(__file__).resolve().with_name("loadgen.py")
LOADGEN_CPU = str((os.cpu_count() or 1) - 1)


def serve_proxied_one(name: str, port: int) -> None:
    """``proxy 1``: one worker behind ngym's HAProxy, as ``--workers N`` runs N (run in a child process)."""
    from ngym.server.hosting.affinity import AffineWorkers
    from ngym.server.pipeline.app import build_server, load_server_class

    spec = resolve(name).serve_spec()
    server = build_server(spec, load_server_class(spec.target))
    public = socket.socket()
    public.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    public.bind(("127.0.0.1", port))
    settings = server.config
    supervisor = AffineWorkers(
        spec,
        1,
        public,
        cookie_name=settings.session_cookie_name,
        session_ttl_seconds=settings.session_ttl_seconds,
        max_sessions=settings.max_sessions,
    )
    raise SystemExit(supervisor.run())


def start(name: str, mode: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {"NGYM_SESSION_SECRET": "bench-secret", "NGYM_SESSION_STORE": "memory"}
    if mode == "proxy 1":
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--serve-proxied", name, str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,
            )
    else:
        proc = start_environment(name, port=port, workers=2 if mode == "proxy 2" else 1, env=env, log=log)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, 180, log, path="/health")
    return proc, url


def tree_cpu(pid: int) -> float:
    """CPU seconds of the process and every descendant alive now, with what their exited children used."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            try:
                t = process.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return total


def load(url: str, rollouts: Path, seconds: float) -> dict[str, float]:
    command = ["taskset", "-c", LOADGEN_CPU, sys.executable, str(LOADGEN), url, str(rollouts), str(seconds)]
    done = subprocess.run([*command, str(CONCURRENCY), "--close"], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(name: str, mode: str, rollouts: Path, work: Path) -> dict[str, float]:
    proc, url = start(name, mode, work / f"{name}-{mode.replace(' ', '')}.log")
    try:
        load(url, rollouts, 1.0)  # warm-up: imports, sandboxes, connections
        before = tree_cpu(proc.pid)
        result = load(url, rollouts, SECONDS)
        cpu = tree_cpu(proc.pid) - before
    finally:
        stop_process(proc, grace=20)
    return {
        "rollouts_per_s": result["rollouts_per_s"],
        "errors": result["errors"],
        "cpu_ms_per_rollout": 1000 * cpu / max(1, result["rollouts"]),
    }


def main() -> None:
    modes = ["direct 1", "proxy 1", "proxy 2"]
    print(f"load generator pinned to CPU {LOADGEN_CPU}; {CONCURRENCY} rollouts in flight; {SECONDS:g} s per point")
    with tempfile.TemporaryDirectory(prefix="ngym-bench-affine-") as tmp:
        work = Path(tmp)
        # `python -m` puts the current directory first on sys.path: in the repository, its resources_servers/
        # folder would shadow an installed NeMo Gym environment of the same name (nemo_counter)
        os.chdir(work)
        for name in ENVIRONMENTS:
            folder = resolve(name).folder
            assert folder is not None
            rollouts = folder / "data" / "example_rollouts.jsonl"
            runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for _ in range(ROUNDS):
                for mode in modes:
                    runs[mode].append(measure(name, mode, rollouts, work))
            base = statistics.median(r["rollouts_per_s"] for r in runs["direct 1"])
            base_cpu = statistics.median(r["cpu_ms_per_rollout"] for r in runs["direct 1"])
            print(f"\n{name}")
            print(
                f"  {'server':10} {'rollouts/s':>11} {'vs direct':>10} {'CPU ms/rollout':>15} {'vs direct':>10} errors"
            )
            for mode in modes:
                rate = statistics.median(r["rollouts_per_s"] for r in runs[mode])
                cpu = statistics.median(r["cpu_ms_per_rollout"] for r in runs[mode])
                errors = sum(r["errors"] for r in runs[mode])
                print(f"  {mode:10} {rate:11.1f} {rate / base:9.2f}x {cpu:15.2f} {cpu / base_cpu:9.2f}x {errors:6.0f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve-proxied"]:
        serve_proxied_one(sys.argv[2], int(sys.argv[3]))
    else:
        main()
