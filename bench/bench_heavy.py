"""Heavy environments side by side: NeMo Gym 0.7.0's own environments served by NeMo Gym itself and by ngym.

For each environment, both servers run the same recorded rows (its ``data/example_rollouts.jsonl`` on its
dataset rows, as ``tools/nemo_envs.py`` replays them) under the same closed-loop load (``bench/heavy_load.py``:
seed → verify per rollout, CONCURRENCY at once, a ``GET /health`` every 50 ms beside it). Rounds alternate
(NeMo Gym, ngym, ngym with the fork warm-up off, ...); medians and the ratio of medians are printed, with the
server's CPU per rollout (its own and its reaped children's: the verify processes it forks), and every row's
rewards on each side (they must agree).

* NeMo Gym side: NeMo Gym 0.7.0's Python 3.13 venv (``tools/nemo_venv.sh``) plus the environment's
  requirements, the environment's app served by ``bench/nemo_serve.py`` (uvicorn, one worker).
* ngym side (as shipped; with forked children lowered 5 nice levels; with the fork template off, i.e. the
  runtime before it): a Python 3.13 venv with this checkout (editable) and ``ngym-nemo-gym``, the environment installed
  with ``ngym install nemo-gym:NAME``, served with ``ngym run NAME``.
* Judges: a fixed verdict on both sides. By default HAProxy answers it from memory (``bench/haproxy_judge.py``),
  so the judge is never what limits throughput; ``--judge uvicorn`` uses ``tools/nemo_scripted_judge.py`` (one
  Python process, as ``make nemo-envs`` replays them). The judge's CPU per rollout and the load generator's cores
  are printed beside each row: a load generator near 1.0 core, or a judge near its own, measures itself.

Beside each environment's rows: where each server's serving thread spent the rounds (on a CPU, in the run queue
waiting for a core, asleep; ``/proc/PID/task/PID/schedstat``) and its slowest rollout (a bound on every verify
child's lifetime: math_with_judge scores 0.0 when its child passes 10 s).

Venvs are cached under ``~/.cache/ngym/bench-heavy`` (``NGYM_NEMO_ENVS_DIR``); the first run builds them.

    .venv/bin/python bench/bench_heavy.py [--envs math_with_judge,equivalence_llm_judge] [--seconds 10]
        [--rounds 3] [--concurrency 16] [--judge haproxy|uvicorn] [--variants "ngym;ngym, serving loop only"]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ngym.config import cache_root

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("NGYM_NEMO_ENVS_DIR", str(cache_root() / "bench-heavy"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.haproxy_judge import haproxy_judge  # noqa: E402
from tools import nemo_envs  # noqa: E402
from tools import nemo_envs_base as ne  # noqa: E402
from tools.nemo_ci import LOAD_DEPENDENT_ROWS  # noqa: E402

#: ngym's runtime as shipped; without the fork template's huge pages; with the server raised above its children
#: (opt-in, ngym/server/hosting/cpu_priority.py); with the environment's coroutines on their own loop forced on, and off
#: (ngym/server/hosting/env_loop.py: on by default for an environment using multiprocessing); a local Ray announcing 8
#: CPUs (NGYM_RAY_NUM_CPUS); without the fork template (the runtime before it).
VARIANTS: dict[str, dict[str, str]] = {
    "ngym": {},
    "ngym, no huge pages": {"NGYM_FORK_HUGEPAGES": "0"},
    "ngym, server raised 15": {"NGYM_SERVER_PRIORITY": "15"},
    "ngym, environment loop": {"NGYM_ENV_LOOP": "1"},
    "ngym, serving loop only": {"NGYM_ENV_LOOP": "0"},
    "ngym, Ray 8 CPUs": {"NGYM_RAY_NUM_CPUS": "8"},
    "ngym, no fork template (before)": {"NGYM_FORK_WARMUP": "0"},
}
DEFAULT_ENVS = "math_with_judge,equivalence_llm_judge,math_with_code,code_gen"


def cpu_seconds(pid: int) -> float:
    """The process's CPU time plus that of its children it has waited for (forked verify processes)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU of ``pid`` and of its live descendants (a launcher's child server; long-lived sandbox processes)."""
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        with contextlib.suppress(OSError):
            total += cpu_seconds(current)
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                pending.extend(int(c) for c in children)
    return total


def loop_thread_times(pid: int) -> tuple[float, float, int]:
    """The serving thread's (the process's main thread, where uvicorn's event loop runs) seconds on a CPU, seconds
    runnable but waiting for one (the run queue: CPU taken by its children and other tenants) and involuntary
    context switches, from ``/proc/PID/task/PID/{schedstat,status}``. Over a round, wall time minus these two is
    the time it slept: idle in epoll, or blocked in a call that sleeps (a child's ``join``, the GIL)."""
    try:
        on_cpu, waiting = (int(v) for v in Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[:2])
        status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    except OSError:
        return 0.0, 0.0, 0
    switches = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("nonvoluntary")), 0)
    return on_cpu / 1e9, waiting / 1e9, switches


def wait_up(url: str, proc: subprocess.Popen[Any], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server for {url} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code < 500:
                return
        time.sleep(0.3)
    raise SystemExit(f"{url} not up after {timeout}s")


def prepare(item: ne.Env, bases: dict[str, Path]) -> dict[str, Path]:
    """The NeMo Gym and ngym interpreters for this environment (made once, cached)."""
    logs = ne.WORK / "logs" / item.name
    logs.mkdir(parents=True, exist_ok=True)
    nemo_python = bases["nemo"] / "bin" / "python"
    if item.extra_requirements():
        nemo_python = ne.WORK / "venvs" / f"nemo-{item.name}" / "bin" / "python"
        if not (nemo_python.parent.parent / ".ready").exists():
            nemo_python = ne.make_overlay(nemo_python.parent.parent, [bases["nemo"], ne.nemo_venv()])
            ok, error = ne.pip_install(nemo_python, item.extra_requirements(), logs / "nemo.install.log")
            if not ok:
                raise SystemExit(f"{item.name}: NeMo side install failed: {error}")
            (nemo_python.parent.parent / ".ready").write_text("")
    venv = ne.WORK / "venvs" / f"ngym-{item.name}"
    ngym_python = venv / "bin" / "python"
    if not (venv / ".ready").exists():
        ngym_python = ne.make_overlay(venv, [bases["ngym"]])
        env = {**os.environ, "NGYM_CACHE_DIR": str(venv / "ngym-cache")}
        done = ne.run(
            [str(ngym_python), "-m", "ngym.cli", "install", f"nemo-gym:{item.name}"],
            logs / "ngym.install.log",
            ne.INSTALL_TIMEOUT,
            env=env,
            cwd=logs,
        )
        if done.returncode:
            raise SystemExit(f"{item.name}: ngym install failed, see {logs / 'ngym.install.log'}")
        (venv / ".ready").write_text("")
    return {"nemo": nemo_python, "ngym": ngym_python}


def start_servers(
    item: ne.Env,
    pythons: dict[str, Path],
    urls: dict[str, str],
    values: list[str],
    logs: Path,
    shipped_only: bool = False,
) -> dict[str, tuple[subprocess.Popen[Any], str]]:
    servers = {}
    run_root, folder = nemo_envs.nemo_run_root(item)
    assert item.env.config is not None and item.env.target is not None  # a servable NeMo Gym environment
    config = str(folder / item.env.config.relative_to(item.env.folder))
    port = ne.free_port()
    cmd = [
        str(pythons["nemo"]),
        str(ROOT / "bench/nemo_serve.py"),
        item.env.target,
        item.instance_name(),
        config,
        str(port),
        json.dumps(urls),
        json.dumps(values),  # the policy_* values its config reads (verifif's judge is ${policy_base_url})
    ]
    env = {**os.environ, "PYTHONPATH": f"{folder}:{run_root}"}
    servers["NeMo Gym"] = (
        ne.spawn(
            cmd,
            cwd=folder,
            env=env,
            stdout=(logs / "nemo.serve.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ),
        f"http://127.0.0.1:{port}",
    )
    model_urls = [a for name, url in urls.items() for a in ("--model-url", f"{name}={url}")]
    venv = pythons["ngym"].parent.parent
    variants = {k: v for k, v in VARIANTS.items() if k == "ngym"} if shipped_only else VARIANTS
    for number, (label, variant) in enumerate(variants.items()):
        port = ne.free_port()
        env = {**os.environ, "NGYM_CACHE_DIR": str(venv / "ngym-cache"), **variant}
        cmd = [str(pythons["ngym"]), "-m", "ngym.cli", "run", item.name, "--port", str(port), *model_urls, *values]
        log = (logs / f"ngym-{number}.serve.log").open("w")
        servers[label] = (
            ne.spawn(cmd, cwd=logs, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True),
            f"http://127.0.0.1:{port}",
        )
    try:
        for proc, url in servers.values():
            wait_up(url, proc)
        time.sleep(1)  # a server that lost its port to another process after free_port() has exited by now:
        for label, (proc, url) in servers.items():  # what answered at its URL was someone else's
            if proc.poll() is not None:
                raise SystemExit(f"{label} at {url} exited with {proc.returncode} (port taken?)")
    except BaseException:  # one did not come up, or we were stopped: none is left running
        for proc, _ in servers.values():
            stop_group(proc)
        raise
    return servers


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM to the server's process group (its verify children, sandboxes, Ray), SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def load(url: str, rows_file: Path, seconds: float, concurrency: int) -> dict[str, Any]:
    """One closed-loop round; with the load generator's own CPU (``loadgen_cores``: near 1.0, it measured itself)."""
    cmd = [sys.executable, str(ROOT / "bench/heavy_load.py"), url, str(rows_file), str(seconds), str(concurrency)]
    before = os.times()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"load on {url} failed: {done.stderr.strip().splitlines()[-1:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    after = os.times()
    used = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    result["loadgen_cores"] = used / max(result["seconds"], 1e-9)
    return result


@contextlib.contextmanager
def judge_for(item: ne.Env, log: Path, kind: str) -> Iterator[tuple[dict[str, str], list[str], int | None]]:
    """``tools.nemo_envs.judge_for`` with the judge's pid (None without a judge); ``kind`` haproxy or uvicorn."""
    refs = sorted(set(item.model_refs()))
    policy = item.policy_values()
    if kind == "uvicorn" or not (refs or policy):
        with nemo_envs.judge_for(item, log) as (urls, values):
            given = [*urls.values(), *(v.split("=", 1)[1] for v in values if v.startswith("policy_base_url="))]
            port = urllib.parse.urlsplit(given[0]).port if given else None
            yield urls, values, listening_pid(port) if port else None  # the uvicorn judge: who listens there
        return
    with haproxy_judge(item.judge_text(), log) as (url, pid):
        policy_values = {"policy_base_url": f"{url}/v1", "policy_api_key": "scripted", "policy_model_name": "scripted"}
        yield {ref: url for ref in refs}, [f"{key}={policy_values[key]}" for key in policy], pid


def listening_pid(port: int) -> int | None:
    """The pid of the process listening on 127.0.0.1:``port`` (psutil), or None."""
    import psutil

    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            pid: int | None = conn.pid
            return pid
    return None


def bench_env(item: ne.Env, bases: dict[str, Path], args: argparse.Namespace) -> dict[str, Any]:
    pythons = prepare(item, bases)
    logs = ne.WORK / "logs" / item.name
    skip = LOAD_DEPENDENT_ROWS.get(item.name, set())
    rows = [row for index, row in enumerate(item.payloads()) if index not in skip]
    rows_file = logs / "bench-rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results: dict[str, list[dict[str, Any]]] = {}
    with judge_for(item, logs / "bench.judge.log", args.judge) as (urls, values, judge_pid):
        servers = start_servers(item, pythons, urls, values, logs, args.shipped_only)
        try:
            for _, url in servers.values():  # warm-up round: imports, first forks
                load(url, rows_file, 2, args.concurrency)
            for _ in range(args.rounds):
                for label, (proc, url) in servers.items():
                    before = tree_cpu(proc.pid)
                    loop_before = loop_thread_times(proc.pid)
                    judge_before = tree_cpu(judge_pid) if judge_pid else 0.0
                    result = load(url, rows_file, args.seconds, args.concurrency)
                    result["cpu_ms_per_rollout"] = (tree_cpu(proc.pid) - before) / max(result["rollouts"], 1) * 1e3
                    loop_after = loop_thread_times(proc.pid)
                    span = max(result["seconds"], 1e-9)
                    result["loop_on_cpu"] = (loop_after[0] - loop_before[0]) / span
                    result["loop_runqueue"] = (loop_after[1] - loop_before[1]) / span
                    result["loop_preempted_per_s"] = (loop_after[2] - loop_before[2]) / span
                    judge_cpu = tree_cpu(judge_pid) - judge_before if judge_pid else 0.0
                    result["judge_cpu_ms_per_rollout"] = judge_cpu / max(result["rollouts"], 1) * 1e3
                    result["judge_cores"] = judge_cpu / max(result["seconds"], 1e-9)
                    results.setdefault(label, []).append(result)
        finally:
            for proc, _ in servers.values():
                stop_group(proc)
    return {"rows": len(rows), "skipped_rows": sorted(skip), "results": results}


def summarise(name: str, outcome: dict[str, Any]) -> list[str]:
    lines = []
    med = {}
    rewards: dict[str, dict[str, list[Any]]] = {}
    for label, rounds in outcome["results"].items():
        m = {
            key: statistics.median(r[key] for r in rounds)
            for key in ("rollouts_per_s", "p50_ms", "p99_ms", "cpu_ms_per_rollout", "health_p50_ms", "health_p99_ms")
        }
        for key in ("loadgen_cores", "judge_cores"):  # absent from results saved by an older bench
            m[key] = statistics.median(r.get(key, float("nan")) for r in rounds)
        m["health_max_ms"] = max(r["health_max_ms"] for r in rounds)
        m["errors"] = sum(r["errors"] for r in rounds)
        med[label] = m
        merged: dict[str, set[Any]] = {}
        for r in rounds:
            for row, values in r["rewards"].items():
                merged.setdefault(row, set()).update(json.dumps(v) for v in values)
        rewards[label] = {row: sorted(v) for row, v in sorted(merged.items(), key=lambda kv: int(kv[0]))}
    base = med["NeMo Gym"]
    if not base["rollouts_per_s"]:
        return [f"| {name} | NeMo Gym completed no rollout ({base['errors']} errors): no ratio |"]
    for label, m in med.items():
        lines.append(
            f"| {name} | {label} | {m['rollouts_per_s']:.1f} | {m['rollouts_per_s'] / base['rollouts_per_s']:.2f}x | "
            f"{m['p50_ms']:.0f} / {m['p99_ms']:.0f} | {m['cpu_ms_per_rollout']:.1f} | "
            f"{base['cpu_ms_per_rollout'] / m['cpu_ms_per_rollout']:.2f}x | {m['health_p50_ms']:.1f} / "
            f"{m['health_p99_ms']:.1f} / {m['health_max_ms']:.0f} | {m['errors']} | {m['loadgen_cores']:.2f} | "
            f"{m['judge_cores']:.2f} |"
        )
    lines.append(serving_thread_line(outcome["results"]))
    same = len({json.dumps(r, sort_keys=True) for r in rewards.values()}) == 1
    lines.append(f"rewards per row, all servers {'IDENTICAL' if same else 'DIFFER'}: " + json.dumps(rewards))
    return lines


def serving_thread_line(results: dict[str, list[dict[str, Any]]]) -> str:
    """Where each server's serving thread spent the rounds (medians, share of wall time): on a CPU (its work, and
    the environment's calls made on the loop), in the run queue (runnable, no core given), asleep (idle, or
    blocked in a sleeping call); a `/health` answer waits behind all but the idle part."""
    parts = []
    for label, rounds in results.items():
        if not all("loop_on_cpu" in r for r in rounds):  # results saved by an older bench
            continue
        on_cpu = statistics.median(r["loop_on_cpu"] for r in rounds)
        queued = statistics.median(r["loop_runqueue"] for r in rounds)
        preempted = statistics.median(r["loop_preempted_per_s"] for r in rounds)
        slowest = max(r.get("max_ms", float("nan")) for r in rounds)
        parts.append(
            f"{label}: on CPU {on_cpu:.0%}, run queue {queued:.0%}, asleep {max(0.0, 1 - on_cpu - queued):.0%}, "
            f"preempted {preempted:.0f}/s, slowest rollout {slowest:.0f} ms"
        )
    return "serving thread (share of wall time): " + "; ".join(parts)


def keep_variants(wanted: str | None) -> None:
    """Serve only the named ``VARIANTS`` (all when None); an unknown name ends the run with the known ones."""
    if not wanted:
        return
    names = [name.strip() for name in wanted.split(";")]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; known: {list(VARIANTS)}")
    for name in list(VARIANTS):
        if name not in names:
            del VARIANTS[name]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=DEFAULT_ENVS)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--judge", choices=("haproxy", "uvicorn"), default="haproxy", help="the scripted judge's server"
    )
    parser.add_argument(
        "--shipped-only", action="store_true", help="only NeMo Gym and ngym as shipped (not the fork-template variants)"
    )
    parser.add_argument(
        "--variants", help=f"ngym variants to serve, separated by ';' (default all): {', '.join(VARIANTS)}"
    )
    args = parser.parse_args()
    keep_variants(args.variants)
    # SIGTERM unwinds like Ctrl-C, through the finally blocks: the servers and the judge (each in its own
    # session, so a signal to this process does not reach them) are stopped
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    names = args.envs.split(",")
    bases = {
        "nemo": ne.base_venv("nemo-base", ne.build_nemo_base, f"overlay of {ne.nemo_venv()}"),
        "ngym": ne.base_venv("ngym-base", ne.build_ngym_base, f"ngym editable from {ROOT}"),
    }
    print(
        f"machine: {os.cpu_count()} cores, shared; load average {os.getloadavg()[0]:.1f}; {args.rounds} alternating "
        f"rounds of {args.seconds:.0f}s, {args.concurrency} concurrent rollouts (seed → recorded tool calls → verify); "
        f"judge: {args.judge}",
        flush=True,
    )
    print(
        "| environment | server | rollouts/s | vs NeMo Gym | p50 / p99 ms | CPU ms/rollout | vs NeMo Gym (CPU) | "
        "/health p50 / p99 / max ms | errors | load gen cores | judge cores |\n" + "|---" * 11 + "|",
        flush=True,
    )
    for item in ne.load_envs(names):
        try:
            outcome = bench_env(item, bases, args)
        except SystemExit as exc:
            print(f"| {item.name} | not measured: {exc} |", flush=True)
            continue
        (ne.WORK / "logs" / item.name / "bench.json").write_text(json.dumps(outcome, default=list))
        print("\n".join(summarise(item.name, outcome)), flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
