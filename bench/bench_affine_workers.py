"""``ngym run NAME --workers N`` for stateful environments: rollouts/s, CPU per rollout and the routing layer's CPU
share, direct vs HAProxy, with the stateless routing ngym uses and the learned stick table it replaced.

For each environment (the counter, whose state is in the process, and math_with_code, a live sandbox per rollout),
these servers are measured side by side, alternating, ROUNDS times:

- ``direct 1``: ``ngym run NAME`` (one process, no proxy);
- ``table 1`` / ``table 2``: 1 or 2 workers behind HAProxy routing by a stick table learned from each answer's
  ``Set-Cookie`` (the design stateless routing replaced: ``learned_table_config`` below);
- ``hash 1`` / ``hash 2``: 1 or 2 workers behind HAProxy routing by ``crc32(session id) mod N`` read from the
  request (``ngym.server.hosting.haproxy``; ``hash 2`` is ``ngym run NAME --workers 2``).

Columns: rollouts/s and its ratio to ``direct 1``; CPU ms per rollout (every process of the server: supervisor,
workers, HAProxy, sandboxes) and its ratio; ``proxy CPU``: HAProxy's own share of that CPU (the routing layer).

The load generator (``bench/loadgen.py``: whole recorded rollouts, cookies copied by hand, CONCURRENCY in flight)
is pinned to the last core with ``taskset``; the servers are not pinned. On a 2-core machine the load generator
takes one core, so two workers cannot double rollouts/s there; CPU per rollout says whether a second worker or
the proxy costs anything.

    .venv/bin/python bench/bench_affine_workers.py     # ~4 min; NGYM_BENCH_SECONDS=5 NGYM_BENCH_ROUNDS=2
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
from ngym.server.hosting.haproxy import Backend
from ngym.targets import resolve

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.entry, when run as a script
from bench.entry import prepare  # noqa: E402

SECONDS = float(os.environ.get("NGYM_BENCH_SECONDS", "5"))
ROUNDS = int(os.environ.get("NGYM_BENCH_ROUNDS", "2"))
CONCURRENCY = int(os.environ.get("NGYM_BENCH_CONCURRENCY", "16"))
ENVIRONMENTS = os.environ.get("NGYM_BENCH_ENVS", "example_session_state_mgmt,math_with_code").split(",")
LOADGEN = Path(__file__).resolve().with_name("loadgen.py")
LOADGEN_CPU = str((os.cpu_count() or 1) - 1)


def learned_table_config(listen_fd: int, backends: list[Backend], cookie: str, ttl: float, cap: int) -> str:
    """The HAProxy configuration ngym used before stateless routing: stick tables learned from every answer's
    ``Set-Cookie`` (kept here only as the bench's "before")."""
    size = max(1024, 2 * cap * max(1, len(backends)))
    typed = "path_end /seed_session /close_session"
    servers = "\n".join(f"    server w{i} {b.address} check inter 1s fall 2 rise 1" for i, b in enumerate(backends))
    return f"""global
    log stderr format short local0 warning
defaults
    mode http
    timeout connect 2s
    timeout client 1h
    timeout server 3600s
    timeout http-request 60s
    timeout http-keep-alive 5s
    option redispatch
    retries 2
    retry-on conn-failure
frontend ngym
    bind fd@{listen_fd}
    option http-buffer-request
    default_backend workers
backend workers
    balance leastconn
    option httpchk GET /livez
    http-check expect status 200
    stick-table type string len 512 size {size} expire {int(ttl) + 60}s
    stick match req.cook({cookie})
    stick store-response res.cook({cookie})
    stick on path,field(3,/) table rollout_ids if {{ path_beg /ng-rollout/ }}
    stick on req.body,json_query('$.resources_session_id') table typed_ids if {{ {typed} }}
    http-response set-header X-Ngym-Worker %s
{servers}
backend rollout_ids
    stick-table type string len 256 size {size} expire {int(ttl) + 60}s
backend typed_ids
    stick-table type string len 256 size {size} expire {int(ttl) + 60}s
"""


def serve_proxied(name: str, port: int, workers: int, learned: bool) -> None:
    """``table N`` / ``hash N``: N workers behind HAProxy, as ``--workers N`` runs them (in a child process)."""
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
        workers,
        public,
        cookie_name=settings.session_cookie_name,
        session_ttl_seconds=settings.session_ttl_seconds,
        max_sessions=settings.max_sessions,
    )
    if learned:
        supervisor.config_path.write_text(
            learned_table_config(
                public.fileno(),
                [w.backend() for w in supervisor.workers],
                settings.session_cookie_name,
                settings.session_ttl_seconds,
                settings.max_sessions,
            )
        )
    raise SystemExit(supervisor.run())


def start(name: str, mode: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {"NGYM_SESSION_SECRET": "bench-secret", "NGYM_SESSION_STORE": "memory"}
    if mode != "direct 1":
        kind, workers = mode.split()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--serve-proxied", name, str(port), workers, kind],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,
            )
    else:
        proc = start_environment(name, port=port, workers=1, env=env, log=log)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, 180, log, path="/health")
    return proc, url


def tree_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of the process and every descendant alive now, with what their exited children used; and of
    the HAProxy among them."""
    total = proxy = 0.0
    try:
        root = psutil.Process(pid)
        for process in [root, *root.children(recursive=True)]:
            try:
                t = process.cpu_times()
                used = t.user + t.system + t.children_user + t.children_system
                total += used
                if process.name().startswith("haproxy"):
                    proxy += used
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return total, proxy


def load(url: str, rollouts: Path, seconds: float) -> dict[str, float]:
    command = ["taskset", "-c", LOADGEN_CPU, sys.executable, str(LOADGEN), url, str(rollouts), str(seconds)]
    done = subprocess.run([*command, str(CONCURRENCY), "--close"], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(name: str, mode: str, rollouts: Path, work: Path) -> dict[str, float]:
    proc, url = start(name, mode, work / f"{name}-{mode.replace(' ', '')}.log")
    try:
        load(url, rollouts, 1.0)  # warm-up: imports, sandboxes, connections
        before, proxy_before = tree_cpu(proc.pid)
        result = load(url, rollouts, SECONDS)
        after, proxy_after = tree_cpu(proc.pid)
        cpu, proxy = after - before, proxy_after - proxy_before
    finally:
        stop_process(proc, grace=20)
    return {
        "rollouts_per_s": result["rollouts_per_s"],
        "errors": result["errors"],
        "cpu_ms_per_rollout": 1000 * cpu / max(1, result["rollouts"]),
        "proxy_share": proxy / cpu if cpu > 0 else 0.0,
    }


def main() -> None:
    modes = ["direct 1", "table 1", "hash 1", "table 2", "hash 2"]
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
                f"  {'server':10} {'rollouts/s':>11} {'vs direct':>10} {'CPU ms/rollout':>15} {'vs direct':>10} "
                f"{'proxy CPU':>10} errors"
            )
            rates, cpus = {}, {}
            for mode in modes:
                rate = rates[mode] = statistics.median(r["rollouts_per_s"] for r in runs[mode])
                cpu = cpus[mode] = statistics.median(r["cpu_ms_per_rollout"] for r in runs[mode])
                share = statistics.median(r["proxy_share"] for r in runs[mode])
                errors = sum(r["errors"] for r in runs[mode])
                print(
                    f"  {mode:10} {rate:11.1f} {rate / base:9.2f}x {cpu:15.2f} {cpu / base_cpu:9.2f}x "
                    f"{share:9.1%} {errors:6.0f}"
                )
            print(
                f"  2 workers vs 1 (hash 2 / hash 1): {rates['hash 2'] / rates['hash 1']:.2f}x rollouts/s; "
                f"stateless vs learned table: {rates['hash 1'] / rates['table 1']:.2f}x at 1 worker, "
                f"{rates['hash 2'] / rates['table 2']:.2f}x at 2"
            )
            # the load generator's cost set apart: 2 workers on 2 cores of their own vs 1 process on 1, from the
            # server CPU each rollout cost
            print(
                f"  with the load generator's cost set apart: 2 workers on 2 cores serve "
                f"{2 * cpus['direct 1'] / cpus['hash 2']:.2f}x what one process serves on 1 core "
                f"({cpus['direct 1']:.2f} vs {cpus['hash 2']:.2f} CPU ms per rollout)"
            )


if __name__ == "__main__":
    prepare(__doc__)
    if sys.argv[1:2] == ["--serve-proxied"]:
        serve_proxied(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "table")
    else:
        main()
