"""``ngym run NAME --workers 2`` with sessions in each process: HAProxy routes every rollout to its worker.

Real processes: the supervisor, two single-worker ngym processes and Debian's HAProxy (``.ci/run`` installs it;
under CI=true a missing binary fails instead of skipping).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from ngym.child_server import free_port
from ngym.server.hosting.haproxy import DEFAULT_HAPROXY_NICE
from ngym.testing import make_response
from tests.integration.conftest import VENV_BIN, HandCookieClient

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")

COUNTER = "example_session_state_mgmt"


def counter_rollout(url: str, i: int, steps: int = 3, pause: float = 0.0) -> dict[str, object]:
    """One counter rollout through the proxy; what happened to it."""
    client = HandCookieClient(url)
    row = {"responses_create_params": {"input": "count"}, "initial_count": i, "expected_count": i + steps}
    seeded = client.post("/seed_session", row)
    worker = seeded.headers.get("x-ngym-worker", "?")
    if seeded.status_code != 200:  # the worker died with the seed in flight: the proxy's 502 (never retried)
        return {"worker": worker, "seed_status": seeded.status_code}
    for _ in range(steps):
        time.sleep(pause)
        step = client.post("/increment_counter", {"count": 1})
        if step.status_code != 200:
            return {"worker": worker, "tool_status": step.status_code, "tool_answer": step.text[:300]}
    verified = client.post("/verify", {**row, "response": make_response()})
    return {"worker": worker, "verify_status": verified.status_code, **(verified.json() if verified.is_success else {})}


def nice_of(pid: int) -> int:
    """The nice value of ``pid`` (``/proc/PID/stat``, field 19)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def command_of(pid: int) -> str:
    return subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()


def tcp_listeners(pids: list[int]) -> list[str]:
    """The TCP sockets in LISTEN state that any of ``pids`` holds (from ``/proc``: their descriptors' inodes
    against the machine's TCP tables)."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                listening.add(fields[9])
    held = []
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:[") and target[8:-1] in listening:
                    held.append(f"pid {pid} fd {fd.name}")
    return held


def test_two_workers_of_a_stateful_environment_score_every_rollout_right(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    served = serve([str(VENV_BIN / "ngym"), "run", COUNTER, "--workers", "2", "--port", str(port)], port)
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda i: counter_rollout(served.url, i), range(60)))
    assert all(r.get("reward") == 1.0 and not r.get("mask_sample") for r in results), results
    assert {r["worker"] for r in results} == {"w0", "w1"}  # both workers served rollouts

    # NeMo Gym 0.7's typed flow on /ng-rollout/<id>/ paths, the cookie dropped: the prefix and the body's
    # resources_session_id route it
    for n in range(6):
        sid, prefix = f"typed-{n}", f"{served.url}/ng-rollout/roll-{n}x"
        typed = {
            "resources_session_id": sid,
            "episode_id": {"rollout_id": f"roll-{n}x", "attempt": 0},
            "task_id": {"taskset": "t", "task_id": str(n)},
            "task_data": {"initial_count": n},
        }
        seed = httpx.post(f"{prefix}/seed_session", json=typed)
        assert seed.status_code == 200, seed.text
        cookie = {"cookie": seed.headers["set-cookie"].split(";")[0]}
        for _ in range(2):
            assert httpx.post(f"{prefix}/increment_counter", json={"count": 1}, headers=cookie).status_code == 200
        assert httpx.post(f"{prefix}/get_counter_value", json={}, headers=cookie).json() == {"count": n + 2}
        close = {k: typed[k] for k in ("resources_session_id", "episode_id")}
        assert httpx.post(f"{served.url}/close_session", json=close).status_code == 200  # routed by the body

    workers = [p for p in children(served.proc.pid) if "ngym.server.hosting.host" in command_of(p)]
    proxy = [p for p in children(served.proc.pid) if "haproxy" in command_of(p)]
    assert len(workers) == 2 and len(proxy) == 1
    # HAProxy reaches the workers on unix sockets in the supervisor's own folder (mode 0700): no TCP hop, and no
    # other user of the machine reaches a worker around the proxy
    config = Path(command_of(proxy[0]).split(" -f ", 1)[1].split()[0])
    folder = config.parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [line.split()[2] for line in config.read_text().splitlines() if line.strip().startswith("server ")] == [
        f"'unix@{folder / 'w0.sock'}'",
        f"'unix@{folder / 'w1.sock'}'",
    ]
    assert all(stat.S_ISSOCK((folder / f"w{i}.sock").stat().st_mode) for i in range(2))
    assert {stat.S_IMODE((folder / f"w{i}.sock").stat().st_mode) for i in range(2)} == {0o600}
    assert not tcp_listeners(workers), "a worker listens on a TCP port"
    # the workers serve as only HAProxy reaches them (no uvicorn server header; the date stays), HAProxy with its
    # process-wide pool cache
    answer = httpx.get(f"{served.url}/livez")
    assert answer.status_code == 200 and "server" not in answer.headers and "date" in answer.headers
    assert " -dMglobal " in f" {command_of(proxy[0])} "
    # HAProxy in the batch scheduling class (woken, it does not preempt a worker), the workers in the normal one
    assert os.sched_getscheduler(proxy[0]) == os.SCHED_BATCH
    assert {os.sched_getscheduler(w) for w in workers} == {os.SCHED_OTHER}
    # HAProxy runs below the workers' priority (it relays several requests per wake-up); the workers at the
    # supervisor's own
    assert nice_of(proxy[0]) == min(19, nice_of(served.proc.pid) + DEFAULT_HAPROXY_NICE)
    assert [nice_of(w) for w in workers] == [nice_of(served.proc.pid)] * 2
    code, out = served.stop(signal.SIGTERM)
    assert code == 0, out
    time.sleep(0.5)
    assert not [p for p in [*workers, *proxy] if subprocess.run(["kill", "-0", str(p)]).returncode == 0]
    assert not folder.exists()  # the sockets and the configuration removed with it


def test_a_killed_worker_loses_its_rollouts_loudly_and_is_restarted(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    served = serve([str(VENV_BIN / "ngym"), "run", COUNTER, "--workers", "2", "--port", str(port)], port)
    workers = [p for p in children(served.proc.pid) if "ngym.server.hosting.host" in command_of(p)]
    with ThreadPoolExecutor(12) as pool:
        running = [pool.submit(counter_rollout, served.url, i, 4, 0.25) for i in range(24)]
        time.sleep(0.6)
        subprocess.run(["kill", "-KILL", str(workers[0])], check=True)
        results = [f.result(timeout=60) for f in running]  # none hangs
    lost = [r for r in results if r.get("reward") != 1.0]
    right = [r for r in results if r.get("reward") == 1.0 and not r.get("mask_sample")]
    assert lost and right and len(lost) + len(right) == len(results)
    for r in lost:  # never an unmasked wrong reward: a tool call 410/502, or a verify masked session_lost
        assert (
            r.get("tool_status") in (410, 502, 503)
            or (r.get("mask_sample") is True and r.get("failure_kind") == "session_lost")
            or r.get("verify_status") in (502, 503)
        ), r
    assert len({r["worker"] for r in lost}) == 1  # only the killed worker's rollouts
    # the worker is restarted and serves new rollouts
    deadline = time.monotonic() + 30
    while len([p for p in children(served.proc.pid) if "ngym.server.hosting.host" in command_of(p)]) < 2:
        assert time.monotonic() < deadline, "the killed worker was not restarted"
        time.sleep(0.2)
    # HAProxy's health check marks it up again: wait until new rollouts land on both workers (not a fixed pause)
    seen: set[object] = set()
    while seen != {"w0", "w1"}:
        probe = counter_rollout(served.url, 0)
        if probe.get("reward") == 1.0:
            seen.add(probe["worker"])
        assert time.monotonic() < deadline + 30, f"HAProxy sent new rollouts only to {seen}: {probe}"
    again = [counter_rollout(served.url, i) for i in range(8)]
    assert all(r.get("reward") == 1.0 for r in again) and {r["worker"] for r in again} == {"w0", "w1"}
    code, out = served.stop(signal.SIGINT)
    assert code == 0 and "restarting it" in out
