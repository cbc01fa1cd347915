"""``ngym.processes``, the one process lifecycle: a child that exits while it is waited for is named with its log,
a supervisor asked to stop stops waiting, and stopping several children stops each one's whole process group."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ngym import processes
from ngym.child_server import free_port


def test_a_child_that_exits_while_waited_for_is_named_with_the_end_of_its_log(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    child = processes.spawn([sys.executable, "-c", "print('cannot load the model'); raise SystemExit(3)"], log)
    with pytest.raises(processes.StartError) as failed:
        processes.wait_healthy(f"http://127.0.0.1:{free_port()}/health", child, 120, log, what="the model server")
    assert str(failed.value) == "the model server exited with code 3: cannot load the model"


def test_waiting_ends_without_an_error_when_the_caller_abandons_it() -> None:
    """A supervisor told to stop while its workers start (``abandon``) gets False back, not a timeout error."""
    asked: list[int] = []

    def abandon() -> bool:
        asked.append(1)
        return len(asked) > 2

    url = f"http://127.0.0.1:{free_port()}/livez"  # nothing listens there
    assert processes.wait_healthy(url, None, 600, interval=0.01, abandon=abandon) is False


def test_progress_is_reported_while_waiting_with_the_log_and_its_last_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("downloading the dataset\n")
    said: list[str] = []
    checks: list[int] = []

    def check() -> bool | None:
        checks.append(1)
        return True if len(checks) > 1 else None

    assert processes.poll(check, 600, interval=0.0, progress=lambda waited: said.append(f"{waited:.0f}"), every=0.0)
    assert said  # reported before the second check answered
    url = f"http://127.0.0.1:{free_port()}/health"
    lines: list[str] = []
    with pytest.raises(processes.StartError):
        processes.wait_healthy(url, None, 0.3, log, interval=0.01, progress=lines.append, every=0.0)
    assert lines and f"waiting for the server to answer {url}; its log: {log}" in lines[0]
    assert lines[0].endswith("its last line: downloading the dataset")


def test_stop_all_stops_each_childs_whole_group() -> None:
    """Each child leads a session (its uvicorn workers, its sandboxes): stopping it leaves none of them running."""
    children = [processes.spawn(["sh", "-c", "sleep 300 & echo $!; wait"], None) for _ in range(2)]
    grandchildren = []
    for child in children:
        found = ""
        for _ in range(600):  # until sh has started its sleep (bounded: 30 s)
            found = subprocess.run(["pgrep", "-P", str(child.pid)], capture_output=True, text=True, timeout=30).stdout
            if found.strip():
                break
            time.sleep(0.05)
        grandchildren += [int(pid) for pid in found.split()]
    assert len(grandchildren) == 2
    processes.stop_all(children, grace=10)
    assert all(child.poll() is not None for child in children)
    # each sleep got the group's SIGTERM too: gone (or a zombie left to init) once the kernel is done with it
    for _ in range(600):  # bounded: 30 s
        if all(processes.start_time(pid) == "" for pid in grandchildren):
            break
        time.sleep(0.05)
    assert [pid for pid in grandchildren if processes.start_time(pid) != ""] == []
