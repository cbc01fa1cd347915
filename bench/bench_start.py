"""Start-up times a user feels, side by side in one run (the cold-start part of bench_core.py, alone).

  ngym --help                      (imports no command module and no environment)
  ngym list                        (warm: its one cache answers, no environment is imported)
  ngym run example_single_tool_call → first 200 on GET /docs, vs a bare uvicorn app with the same endpoints

Medians of 7 runs after one warm-up each (bytecode caching on, as in any deployment: see bench_core.start),
as wall-clock time and as the CPU time (user + system) the process spent: on a shared, loaded machine the
wall clock mostly measures the other tenants, the CPU time what ngym costs.
Targets (issue 2/3/13): --help and warm list ≤ 0.3 s, run → first 200 ≤ 0.6 s.

    .venv/bin/python bench/bench_start.py
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.bench_core, when run as a script

from bench.bench_core import cpu_seconds, start  # noqa: E402
from bench.entry import prepare  # noqa: E402
from ngym.child_server import stop_process

RUNS = 7


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of ``cmd``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - began
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)


def main() -> None:
    ngym = [sys.executable, "-m", "ngym.cli"]
    labels = ("ngym --help", "ngym list (warm)", "ngym run NAME", "bare")
    results: dict[str, list[tuple[float, float]]] = {label: [] for label in labels}
    timed([*ngym, "--help"])
    timed([*ngym, "list"])
    for kind in ("ngym", "bare"):  # warm-up starts: __pycache__ written, page cache hot
        stop_process(start(kind)[0])
    for _ in range(RUNS):
        results["ngym --help"].append(timed([*ngym, "--help"]))
        results["ngym list (warm)"].append(timed([*ngym, "list"]))
        for kind, label in (("ngym", "ngym run NAME"), ("bare", "bare")):
            proc, _url, started_in = start(kind)  # spawn → first 200 on GET /docs
            results[label].append((started_in, cpu_seconds(proc.pid)))
            stop_process(proc)
    load = os.getloadavg()[0]
    print(f"median of {RUNS} runs on {os.cpu_count()} cores (load average {load:.1f}):")
    print(f"  {'':24s}{'wall s':>8s}{'CPU s':>8s}  target")
    for label, target in (("ngym --help", "0.3"), ("ngym list (warm)", "0.3"), ("ngym run NAME", "0.6"), ("bare", "")):
        wall = statistics.median(w for w, _ in results[label])
        cpu = statistics.median(c for _, c in results[label])
        shown = "bare uvicorn → first 200" if label == "bare" else label
        print(f"  {shown:24s}{wall:8.3f}{cpu:8.3f}  {'≤ ' + target + ' s' if target else ''}")
    ratio = statistics.median(c for _, c in results["ngym run NAME"]) / statistics.median(c for _, c in results["bare"])
    print(f"  ngym run NAME / bare uvicorn, CPU to first 200: {ratio:.2f}x")


if __name__ == "__main__":
    prepare(__doc__)
    main()
