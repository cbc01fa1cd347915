"""``ngym run NAME --workers 2``: a paused worker's sessions wait for it; only a dead worker's are lost.

A worker HAProxy counts down because it stopped answering its checks (``kill -STOP``: a long pause, a slow or
swapped-out process) still holds its sessions: their requests go to it and wait, and are answered by it once it
runs again, so the rollout scores as a clean replay of the same calls. Only a worker whose socket refuses (it
died) has its sessions' requests answered elsewhere: 410, and a verify masked ``session_lost``.

Real processes: ``ngym run`` (the supervisor), its workers and Debian's HAProxy; the test waits on what HAProxy
reports (its runtime API), never on time.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ngym.testing import make_response
from tests.support.affinity_probes import Rollout, affine_server, idle_sessions, new_client, seed

pytestmark = pytest.mark.skipif(
    (shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")) is None,
    reason="haproxy is not installed (apt-get install haproxy)",
)


def verify(client: httpx.Client, rollout: Rollout, calls: int) -> httpx.Response:
    """The verify a trainer sends after ``calls`` tool calls: it expects every call the model made."""
    start = int(str(rollout.row["initial_count"]))
    body = {**rollout.row, "expected_count": start + calls, "response": make_response()}
    return rollout.call(client, "/verify", body)


def clean_replay(url: str, rollout: Rollout, calls: int) -> dict[str, object]:
    """The same row and calls on a fresh session, nothing paused: the reward the rollout should get."""
    with new_client() as client:
        again = seed(client, url, int(str(rollout.row["initial_count"])))
        for _ in range(calls):
            assert again.increment(client).status_code == 200
        answer = verify(client, again, calls)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def call_alone(rollout: Rollout) -> httpx.Response:
    """One tool call on its own connection, with a client timeout long enough to wait out a pause."""
    with httpx.Client(timeout=300) as client:
        return rollout.call(client, "/increment_counter", {"count": 1})


def exited(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def test_a_paused_workers_session_waits_for_it_and_a_dead_ones_is_lost_loudly() -> None:
    with affine_server(2) as served:
        rollouts = idle_sessions(served.url, 6)  # one call each, on both workers
        paused = next(r for r in rollouts if r.worker == "w1")
        other = next(r for r in rollouts if r.worker == "w0")
        pid = served.worker_pid(1)
        os.kill(pid, signal.SIGSTOP)
        try:
            served.wait_state("w1", "DOWN")
            with ThreadPoolExecutor(1) as pool, new_client() as client:
                call = pool.submit(call_alone, paused)
                served.wait_in_flight("w1", 1, [call])
                assert not call.done(), (call.result().status_code, call.result().text)  # main: 410 from w0
                # the up worker's sessions and new seeds go on meanwhile
                assert other.increment(client).status_code == 200
                assert {seed(client, served.url, i).worker for i in range(4)} == {"w0"}
                os.kill(pid, signal.SIGCONT)
                answer = call.result(timeout=300)
            assert answer.status_code == 200, answer.text
            assert answer.headers["x-ngym-worker"] == "w1"
        finally:
            os.kill(pid, signal.SIGCONT)
        with new_client() as client:
            scored = verify(client, paused, 2)
        assert scored.status_code == 200 and scored.headers["x-ngym-worker"] == "w1", scored.text
        assert scored.json()["reward"] == clean_replay(served.url, paused, 2)["reward"] == 1.0
        assert not scored.json().get("mask_sample")

        # a worker that died lost its sessions: the call is answered 410 (by the other worker, or by the
        # restarted one), and the verify is masked, never scored
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not exited(pid):
            assert time.monotonic() < deadline, "the killed worker did not exit"
            time.sleep(0.05)
        with new_client() as client:
            answer = paused.call(client, "/increment_counter", {"count": 1})
            assert answer.status_code == 410, answer.text
            masked = verify(client, paused, 3)
        assert masked.status_code == 200, masked.text
        assert masked.json()["mask_sample"] is True and masked.json()["failure_kind"] == "session_lost"
