"""uvicorn's workers of one port count rollouts in one file (``ngym.server.pipeline.traffic``): every worker's
``/health`` reports their sum, and a worker started again in a dead one's place carries its counts on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ngym.server.pipeline.traffic import Traffic, make_traffic_file

WORKER = """
import sys, time
from pathlib import Path
from ngym.server.pipeline.traffic import Traffic
traffic = Traffic(Path(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    traffic.count("/verify", 200)
traffic.count("/seed_session", 500)
print("counted", flush=True)
sys.stdin.readline()  # alive (its slot held) until told to end
"""


def _worker(path: Path, verifies: int) -> subprocess.Popen[str]:
    started = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(path), str(verifies)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert started.stdout is not None and started.stdout.readline().strip() == "counted"
    return started


def _end(worker: subprocess.Popen[str]) -> None:
    assert worker.stdin is not None
    worker.stdin.close()
    assert worker.wait(30) == 0


def test_workers_sum_and_a_restarted_one_carries_on(tmp_path: Path) -> None:
    path = tmp_path / "traffic"
    make_traffic_file(path)
    first, second = _worker(path, 3), _worker(path, 4)  # two live workers: two slots
    try:
        total = Traffic(path).as_dict()  # a third process reads what both counted (its own slot is empty)
        assert total == {"requests": 9, "verified": 7, "server_errors": 2}
    finally:
        _end(first)
        _end(second)
    again = _worker(path, 1)  # started in their place: takes a freed slot and counts on from it
    try:
        assert Traffic(path).as_dict() == {"requests": 11, "verified": 8, "server_errors": 3}
    finally:
        _end(again)


def test_without_a_file_a_process_counts_its_own() -> None:
    traffic = Traffic.for_this_process()
    traffic.count("/verify", 200)
    assert traffic.as_dict() == {"requests": 1, "verified": 1, "server_errors": 0} and traffic.verified == 1
