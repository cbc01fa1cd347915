"""Benchmark scripts without an argument parser: ``--help`` prints what they measure (it started a run of minutes),
and SIGTERM (``timeout``, a CI stage ending) runs their ``finally`` blocks (servers they started were left running:
an `ngym run` and HAProxy after ``timeout 60 bench/bench_affine_workers.py --help``)."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SCRIPTS = ["bench_affine_workers", "bench_list", "bench_redis_store", "bench_start", "bench_workplace"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_what_it_measures_and_runs_nothing(script: str) -> None:
    path = ROOT / "bench" / f"{script}.py"
    first = (ast.get_docstring(ast.parse(path.read_text())) or "").splitlines()[0]
    done = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == first, done.stdout


def test_sigterm_runs_the_scripts_finally_blocks(tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    script = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
        "from bench.entry import prepare\n"
        "prepare(None)\n"
        "try:\n"
        "    print('running', flush=True)\n"
        "    time.sleep(60)\n"
        "finally:\n"
        f"    open({str(marker)!r}, 'w').write('servers stopped')\n"
    )
    running = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert running.stdout is not None and running.stdout.readline().strip() == "running"
    running.send_signal(signal.SIGTERM)
    assert running.wait(30) == 128 + signal.SIGTERM
    assert marker.read_text() == "servers stopped"
