"""``ngym status``: live sessions and the tool-call bytes they hold, per worker of an ``ngym run --workers 2`` at its
URL, summed on the environment's row (a local fleet's unit: ``test_fleet_local``; Ray replicas:
``tests/cluster/test_fleet_ray_replicas``).

Real processes: ``ngym run`` with HAProxy in front of two workers. Each
rollout's worker is the slot its session id hashes to and each tool call's bytes are what was sent, so every
figure of the status is checked against what the test knows each worker holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ngym.child_server import free_port, start_environment, stop_process, wait_healthy
from ngym.server.sessions.routing import slot_of
from tests.integration.test_affine_workers import HAPROXY

pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")

COUNTER = "example_session_state_mgmt"


def ngym(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NGYM_PROGRESS_SECONDS": "2"}
    command = [sys.executable, "-m", "ngym.cli", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def open_sessions(url: str, count: int) -> tuple[Counter[str], Counter[str]]:
    """``count`` seeded sessions, each with tool calls of a different size, left open: per worker (w0, w1), the
    sessions and the tool-call bytes sent."""
    sessions: Counter[str] = Counter()
    sent: Counter[str] = Counter()
    for i in range(count):
        with httpx.Client(base_url=url, timeout=30) as http:
            seeded = http.post("/seed_session", json={"initial_count": 1})
            assert seeded.status_code == 200, seeded.text
            cookie = {"cookie": seeded.headers["set-cookie"].split(";")[0]}
            # the worker holding it: the slot its id hashes to (a fleet's front renames HAProxy's worker header)
            session_id = cookie["cookie"].partition("=")[2].strip('"').rpartition(".")[0]
            worker = f"w{slot_of(session_id, 2)}"
            for _ in range(i + 1):
                body = json.dumps({"count": 1}).encode()
                answer = http.post(
                    "/increment_counter", content=body, headers={**cookie, "content-type": "application/json"}
                )
                assert answer.status_code == 200, answer.text
                sent[worker] += len(body)
            sessions[worker] += 1
    return sessions, sent


def check_parts(row: dict[str, object], sessions: Counter[str], sent: Counter[str]) -> None:
    parts = {p["name"]: p for p in row["parts"]}  # type: ignore[attr-defined]
    assert set(parts) == {"w0", "w1"}, row
    for name, part in parts.items():
        assert (part["health"], part["live_sessions"], part["session_bytes"]) == ("ok", sessions[name], sent[name])
    assert row["live_sessions"] == sum(sessions.values()) and row["session_bytes"] == sum(sent.values())
    assert str(row["reason"]).startswith("2/2 workers answer")


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = tmp_path / "run.log"
    proc = start_environment(COUNTER, port=port, workers=2, env={"NGYM_SESSION_STORE": "memory"}, log=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 120, log, path="/health")
        yield url
    finally:
        stop_process(proc)


def test_status_of_an_ngym_run_url_reads_each_worker(two_workers: str, tmp_path: Path) -> None:
    sessions, sent = open_sessions(two_workers, 8)
    assert set(sessions) == {"w0", "w1"}  # 8 seeds spread over both (least connections)
    status = ngym("status", two_workers, "--json", "--interval", "0", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    (row,) = json.loads(status.stdout)
    check_parts(row, sessions, sent)
    assert row["rollouts_per_second"] is None  # one reading: no rate (it read 0.0, as an idle server would)
    human = ngym("status", two_workers, "--interval", "0", cwd=tmp_path).stdout.splitlines()
    assert human[0].split()[:6] == ["server", "kind", "health", "sessions", "session", "bytes"]
    assert [line.split()[:4] for line in human[2:]] == [
        ["w0", "ok", str(sessions["w0"]), str(sent["w0"])],
        ["w1", "ok", str(sessions["w1"]), str(sent["w1"])],
    ]


def test_status_of_a_url_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    status = ngym("status", "ftp://127.0.0.1:1", cwd=tmp_path)
    assert status.returncode != 0 and "Traceback" not in status.stderr
    down = ngym("status", f"http://127.0.0.1:{free_port()}", "--json", "--interval", "0", cwd=tmp_path)
    assert down.returncode == 1 and json.loads(down.stdout)[0]["health"] == "down"
    # and the table says why, not only "down" (a mistyped port reads as an environment that died)
    table = ngym("status", f"http://127.0.0.1:{free_port()}", "--interval", "0", cwd=tmp_path)
    assert table.returncode == 1 and "nothing answers GET /health there" in table.stdout, table.stdout


def test_profile_counts_the_sessions_of_every_worker(two_workers: str) -> None:
    """`ngym profile` reads the sessions a run left live from every worker of a `--workers N` server
    (`live_sessions_at`); one `GET /health` answers for the one worker it reaches, so a run's leaked sessions on
    the other worker read as none."""
    from ngym.fleet.status import live_sessions_at

    sessions, _ = open_sessions(two_workers, 8)
    assert set(sessions) == {"w0", "w1"}
    assert live_sessions_at(two_workers) == 8
    one = httpx.get(f"{two_workers}/health", timeout=30).json()["live_sessions"]
    assert one in (sessions["w0"], sessions["w1"]) and one < 8  # what profile read before
