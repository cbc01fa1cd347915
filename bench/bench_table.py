"""docs/performance.md's tables in one command: every row rerun side by side, printed as markdown.

Runs, one after the other (each itself alternating its servers round by round):

1. ``bench/bench_core.py``: the weather rollout, ngym vs bare FastAPI (wrk, server on CPU 0, wrk on CPU 1);
2. ``bench/bench_heavy.py --shipped-only``: NeMo Gym 0.7.0 vs ngym on NeMo Gym's own environments, the issue's
   rows (mcqa, example_multi_step, math_with_judge) and the heavy ones (LLM judges with an HAProxy scripted judge,
   math_with_code, code_gen);
3. ``bench/bench_workers.py``: ``--workers 2`` vs 1 on the Redis and the HAProxy-affinity paths.

Prints each part's markdown as it finishes, the machine's load before and after, and the total time. With the
defaults it takes ~15 minutes on a 2-core machine once bench_heavy's venvs exist (its first run builds them:
~5 minutes per environment more).

    .venv/bin/python bench/bench_table.py [--quick] [--envs mcqa,...] [--skip core,heavy,workers]
    make bench-table
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY_ENVS = "mcqa,example_multi_step,math_with_judge,equivalence_llm_judge,simpleqa,math_with_code,code_gen"
PARTS = ("core", "heavy", "workers")


def run(cmd: list[str]) -> str:
    """Run one benchmark (its output streamed to stderr as it comes, for whoever watches); its stdout."""
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        sys.stderr.write(line)
        lines.append(line)
    if proc.wait():
        lines.append(f"(exited with {proc.returncode})\n")
    return "".join(lines)


def core_rows(out: str) -> list[str]:
    """bench_core's text report as one markdown row (rollouts/s, the ratios, CPU per rollout)."""

    def grab(pattern: str) -> str:
        found = re.search(pattern, out)
        return found.group(1) if found else "?"

    rates = re.search(r"rollouts/s \(median\)\s+(\d+)\s+(\d+)", out)
    cpu = re.search(r"server CPU us/rollout\s+(\d+)\s+(\d+)", out)
    ratio = grab(r"rollouts/s: median of \d+ paired runs ([\d.]+x \(min [\d.]+, max [\d.]+)")
    cpu_ratio = grab(r"\(bare / ngym\): median ([\d.]+x \(min [\d.]+, max [\d.]+)")
    return [
        "| ngym rollouts/s | bare rollouts/s | ngym / bare (median of paired rounds) | server CPU µs/rollout ngym / "
        "bare | by CPU per rollout (bare / ngym) |",
        "|---|---|---|---|---|",
        f"| {rates.group(1) if rates else '?'} | {rates.group(2) if rates else '?'} | **{ratio})** | "
        f"{cpu.group(1) if cpu else '?'} / {cpu.group(2) if cpu else '?'} | **{cpu_ratio})** |",
    ]


def table_lines(out: str) -> list[str]:
    """The markdown table rows and the summary lines a benchmark printed (everything but its progress)."""
    keep = ("|", "machine:", "rewards per row", "load average at the end", "redis:", "affinity:", "(exited")
    return [line.rstrip() for line in out.splitlines() if line.startswith(keep)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=HEAVY_ENVS, help="bench_heavy's environments")
    parser.add_argument("--skip", default="", help=f"parts to leave out: {', '.join(PARTS)}")
    parser.add_argument("--quick", action="store_true", help="shorter rounds (a smoke run, ~half the time)")
    args = parser.parse_args()
    skip = {p for p in args.skip.split(",") if p}
    if not skip <= set(PARTS):
        sys.exit(f"bench_table: --skip takes {', '.join(PARTS)}")
    py = sys.executable
    began = time.monotonic()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# bench_table, {stamp}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start\n")
    timings = []
    if "core" not in skip:
        t = time.monotonic()
        rounds, seconds = ("4", "2") if args.quick else ("6", "3")
        out = run([py, "bench/bench_core.py", "--rounds", rounds, "--seconds", seconds, "--sessions", "5000"])
        print("## The core: weather rollout vs bare FastAPI (bench/bench_core.py)\n")
        print("\n".join(core_rows(out)) + "\n", flush=True)
        timings.append(f"core {time.monotonic() - t:.0f}s")
    if "heavy" not in skip:
        t = time.monotonic()
        rounds, seconds = ("2", "5") if args.quick else ("3", "6")
        cmd = [py, "bench/bench_heavy.py", "--shipped-only", "--envs", args.envs, "--rounds", rounds]
        out = run([*cmd, "--seconds", seconds])
        print("## NeMo Gym's environments, NeMo Gym 0.7.0 vs ngym (bench/bench_heavy.py)\n")
        print("\n".join(table_lines(out)) + "\n", flush=True)
        timings.append(f"heavy {time.monotonic() - t:.0f}s")
    if "workers" not in skip:
        t = time.monotonic()
        rounds = "3" if args.quick else "4"
        out = run([py, "bench/bench_workers.py", "--rounds", rounds, "--seconds", "4"])
        print("## Workers scale (bench/bench_workers.py)\n")
        print("\n".join(table_lines(out)) + "\n", flush=True)
        timings.append(f"workers {time.monotonic() - t:.0f}s")
    total = time.monotonic() - began
    print(
        f"total {total / 60:.1f} min ({', '.join(timings)}); load average at the end {os.getloadavg()[0]:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
