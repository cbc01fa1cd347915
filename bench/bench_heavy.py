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
* Judges: ``tools/nemo_scripted_judge.py`` (a fixed verdict) on both sides, as ``make nemo-envs`` replays them.

Venvs are cached under ``~/.cache/ngym/bench-heavy`` (``NGYM_NEMO_ENVS_DIR``); the first run builds them.

    .venv/bin/python bench/bench_heavy.py [--envs math_with_judge,equivalence_llm_judge] [--seconds 10]
        [--rounds 3] [--concurrency 16]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("NGYM_NEMO_ENVS_DIR", str(Path.home() / ".cache" / "ngym" / "bench-heavy"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tools import nemo_envs as ne  # noqa: E402
from tools.nemo_ci import LOAD_DEPENDENT_ROWS  # noqa: E402

#: ngym's runtime as shipped; without the fork template's huge pages; with the server raised above its children
#: (opt-in, ngym/server/cpu_priority.py); without the fork template (the runtime before it).
VARIANTS: dict[str, dict[str, str]] = {
    "ngym": {},
    "ngym, no huge pages": {"NGYM_FORK_HUGEPAGES": "0"},
    "ngym, server raised 15": {"NGYM_SERVER_PRIORITY": "15"},
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


def wait_up(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
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
    item: ne.Env, pythons: dict[str, Path], urls: dict[str, str], values: list[str], logs: Path
) -> dict[str, tuple[subprocess.Popen, str]]:
    servers = {}
    run_root, folder = ne.nemo_run_root(item)
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
    for number, (label, variant) in enumerate(VARIANTS.items()):
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
    except BaseException:
        for proc, _ in servers.values():
            stop_group(proc)
        raise
    return servers


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its verify children, sandboxes, Ray), SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def load(url: str, rows_file: Path, seconds: float, concurrency: int) -> dict:
    cmd = [sys.executable, str(ROOT / "bench/heavy_load.py"), url, str(rows_file), str(seconds), str(concurrency)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"load on {url} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


def bench_env(item: ne.Env, bases: dict[str, Path], args: argparse.Namespace) -> dict:
    pythons = prepare(item, bases)
    logs = ne.WORK / "logs" / item.name
    skip = LOAD_DEPENDENT_ROWS.get(item.name, set())
    rows = [row for index, row in enumerate(item.payloads()) if index not in skip]
    rows_file = logs / "bench-rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    results: dict[str, list[dict]] = {}
    with ne.judge_for(item, logs / "bench.judge.log") as (urls, values):
        servers = start_servers(item, pythons, urls, values, logs)
        try:
            for _, url in servers.values():  # warm-up round: imports, first forks
                load(url, rows_file, 2, args.concurrency)
            for _ in range(args.rounds):
                for label, (proc, url) in servers.items():
                    before = tree_cpu(proc.pid)
                    result = load(url, rows_file, args.seconds, args.concurrency)
                    result["cpu_ms_per_rollout"] = (tree_cpu(proc.pid) - before) / max(result["rollouts"], 1) * 1e3
                    results.setdefault(label, []).append(result)
        finally:
            for proc, _ in servers.values():
                stop_group(proc)
    return {"rows": len(rows), "skipped_rows": sorted(skip), "results": results}


def summarise(name: str, outcome: dict) -> list[str]:
    lines = []
    med = {}
    rewards: dict[str, dict[str, list]] = {}
    for label, rounds in outcome["results"].items():
        m = {
            key: statistics.median(r[key] for r in rounds)
            for key in ("rollouts_per_s", "p50_ms", "p99_ms", "cpu_ms_per_rollout", "health_p50_ms", "health_p99_ms")
        }
        m["health_max_ms"] = max(r["health_max_ms"] for r in rounds)
        m["errors"] = sum(r["errors"] for r in rounds)
        med[label] = m
        merged: dict[str, set] = {}
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
            f"{m['health_p99_ms']:.1f} / {m['health_max_ms']:.0f} | {m['errors']} |"
        )
    same = len({json.dumps(r, sort_keys=True) for r in rewards.values()}) == 1
    lines.append(f"rewards per row, all servers {'IDENTICAL' if same else 'DIFFER'}: " + json.dumps(rewards))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=DEFAULT_ENVS)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    names = args.envs.split(",")
    bases = {
        "nemo": ne.base_venv("nemo-base", ne.build_nemo_base, f"overlay of {ne.nemo_venv()}"),
        "ngym": ne.base_venv("ngym-base", ne.build_ngym_base, f"ngym editable from {ROOT}"),
    }
    print(
        f"machine: {os.cpu_count()} cores, shared; load average {os.getloadavg()[0]:.1f}; {args.rounds} alternating "
        f"rounds of {args.seconds:.0f}s, {args.concurrency} concurrent rollouts (seed → recorded tool calls → verify)",
        flush=True,
    )
    print(
        "| environment | server | rollouts/s | vs NeMo Gym | p50 / p99 ms | CPU ms/rollout | vs NeMo Gym (CPU) | "
        "/health p50 / p99 / max ms | errors |\n|---|---|---|---|---|---|---|---|---|",
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
