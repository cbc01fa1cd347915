"""``.ci/stages.sh``: every CI stage timed, background stages included, and a failure anywhere fails the run."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def ci(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` after sourcing ``.ci/stages.sh``, as ``.ci/run`` does."""
    body = f"set -euo pipefail\nsource {REPO / '.ci' / 'stages.sh'}\n{script}\n"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=60, env=env)


def summary(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The summary's lines as ``NAME VERDICT`` (each also carries the stage's time in seconds)."""
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ci: stage times (total"))
    rows = [re.fullmatch(r"ci:\s+(\S+)\s+\d+ s  (.*)", line) for line in lines[start + 1 :]]
    return [f"{row.group(1)} {row.group(2)}" for row in rows if row]


def test_a_background_stage_runs_beside_the_next_and_is_timed_in_the_summary(tmp_path: Path) -> None:
    marker = tmp_path / "made"
    done = ci(
        f"stage_background venvs bash -c 'echo making; touch {marker}'\n"
        "stage lint true\n"
        "stage_wait venvs\n"
        f"stage uses test -f {marker}",
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ci:   venvs: making" in done.stdout  # its log's tail, printed when waited for
    assert [line.split(" (")[0] for line in summary(done)] == ["lint ok", "venvs ok", "uses ok"]
    assert "(background; waited" in summary(done)[1]


def test_a_failed_background_stage_fails_the_run_when_waited_for(tmp_path: Path) -> None:
    done = ci(
        "stage_background venvs bash -c 'echo no such package >&2; exit 3'\n"
        "stage lint true\n"
        "stage_wait venvs\n"
        "stage never_reached true",
        tmp_path,
    )
    assert done.returncode == 3
    assert "ci:   venvs: no such package" in done.stdout and "never_reached" not in done.stdout
    assert [line.split(" (background")[0] for line in summary(done)] == ["lint ok", "venvs FAILED (exit 3)"]


def test_a_failed_stage_stops_a_background_stage_still_running(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = f"for _ in $(seq 600); do [ -s {pid_file} ] && break; sleep 0.05; done"  # fails once it runs
    done = ci(
        f"stage_background slow bash -c 'echo $$ > {pid_file}.new; mv {pid_file}.new {pid_file}; exec sleep 300'\n"
        f"stage lint bash -c '{started}; false'",
        tmp_path,
    )
    assert done.returncode == 1 and summary(done) == ["lint FAILED (exit 1)"]
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]:
        assert time.monotonic() < deadline, "the background stage outlived the run"
        time.sleep(0.05)


def test_a_lane_runs_its_stages_in_turn_beside_the_next_and_times_each(tmp_path: Path) -> None:
    order = tmp_path / "order"
    done = ci(
        f"stage_lane side lint 'echo lint >> {order}; echo 3 passed' conformance 'echo conformance >> {order}'\n"
        "stage test true\n"
        "stage_wait side\n"
        f"stage after test -s {order}",
        tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert order.read_text().split() == ["lint", "conformance"]
    assert "ci:   lint: 3 passed" in done.stdout  # each stage's last lines, printed when the lane is waited for
    rows = [line.split(" (")[0] for line in summary(done)]
    assert rows == ["test ok", "lint ok", "conformance ok", "side ok", "after ok"]
    assert "(lane side)" in summary(done)[1]


def test_a_failed_stage_in_a_lane_stops_the_lane_and_the_run_before_the_next_stage(tmp_path: Path) -> None:
    later = tmp_path / "later"
    done = ci(
        f"stage_lane side lint 'echo E501 line too long; exit 4' fuzz 'touch {later}'\n"
        'stage test bash -c \'while [ ! -f "$0"/side.done ]; do sleep 0.05; done\' "$bg_dir"\n'
        "stage never_reached true",
        tmp_path,
    )
    assert done.returncode == 4
    assert not later.exists(), "the lane went on past its failed stage"
    assert "ci:   lint: E501 line too long" in done.stdout and "never_reached" not in done.stdout
    rows = [line.split(" (")[0] for line in summary(done)]
    assert rows == ["test ok", "lint FAILED", "side FAILED"]


def test_a_run_that_fails_while_a_lane_runs_keeps_the_times_of_the_lane_stages_that_finished(tmp_path: Path) -> None:
    done = ci(
        "stage_lane side lint 'echo 3 passed' fleet 'exec sleep 300'\n"
        'stage test bash -c \'while [ ! -s "$0"/side.stages ]; do sleep 0.05; done; exit 2\' "$bg_dir"',
        tmp_path,
    )
    assert done.returncode == 2
    assert [line.split(" (")[0] for line in summary(done)] == ["test FAILED", "lint exit 0"]
    assert "ci:   side" in done.stdout and "(stopped: the run ended before it did)" in done.stdout
