"""Probes of ``ngym run NAME --workers N`` session affinity, shared by the fault tests and ``make fuzz``.

Real processes: ``ngym run`` (the supervisor), its single-worker processes and Debian's HAProxy. Each probe
waits on conditions it can observe (HAProxy's own view of its workers through its runtime API), never on time.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from pathlib import Path

import httpx

from ngym.child_server import free_port, wait_healthy
from ngym.testing import make_response
from tests.integration.conftest import VENV_BIN

COUNTER = "example_session_state_mgmt"
COOKIE = "ngym_session"


class _NoJar(CookieJar):
    """Cookies are copied by hand, as agents do: the client keeps none of the answers'."""

    def extract_cookies(self, response: object, request: object) -> None:  # type: ignore[override]
        pass


def new_client() -> httpx.Client:
    """A keep-alive client that sends only the cookies a call names."""
    return httpx.Client(timeout=60, cookies=_NoJar())


@dataclass
class Affine:
    """A running ``ngym run COUNTER --workers N``: its URL, the supervisor and a log file."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def children(self) -> list[int]:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def worker_pid(self, index: int) -> int:
        """The pid of worker ``index`` (its ``NGYM_WORKER_INDEX``)."""
        for pid in self.children():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"NGYM_WORKER_INDEX={index}".encode() in environ:
                return pid
        raise AssertionError(f"no worker {index} among {self.children()}")

    def stats_socket(self) -> str:
        """HAProxy's runtime API socket (next to the configuration it was started with)."""
        for pid in self.children():
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if args and b"haproxy" in args[0] and b"-f" in args:
                config = Path(args[args.index(b"-f") + 1].decode())
                return str(config.parent / "haproxy.sock")
        raise AssertionError("no HAProxy among the supervisor's children")

    def server_states(self) -> dict[str, str]:
        """HAProxy's view: worker name -> UP / DOWN / ... (``show stat`` of the ``workers`` backend)."""
        return haproxy_states(self.stats_socket())

    def wait_state(self, worker: str, state: str, timeout: float = 60) -> None:
        """Wait until HAProxy counts ``worker`` as ``state`` (UP, DOWN)."""
        deadline = time.monotonic() + timeout
        while self.server_states().get(worker) != state:
            assert time.monotonic() < deadline, f"{worker} not {state} within {timeout} s: {self.server_states()}"
            time.sleep(0.1)

    def in_flight(self, worker: str) -> int:
        """The requests HAProxy has sent to ``worker`` and not yet had answered (``scur`` of ``show stat``)."""
        return int(haproxy_stats(self.stats_socket())[worker].get("scur") or 0)

    def wait_in_flight(self, worker: str, count: int, calls: list[Future[httpx.Response]], timeout: float = 60) -> None:
        """Wait until HAProxy has ``count`` requests in flight to ``worker``, or one of ``calls`` ended."""
        deadline = time.monotonic() + timeout
        while self.in_flight(worker) < count and not any(call.done() for call in calls):
            assert time.monotonic() < deadline, f"{self.in_flight(worker)}/{count} requests in flight to {worker}"
            time.sleep(0.05)


def haproxy_stats(stats_socket: str) -> dict[str, dict[str, str]]:
    """Server name -> its row of ``show stat`` (the ``workers`` backend), from HAProxy's runtime API."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(5)
        conn.connect(stats_socket)
        conn.sendall(b"show stat\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    lines = data.decode().splitlines()
    header = lines[0].lstrip("# ").split(",")
    rows = {}
    for line in lines[1:]:
        row = dict(zip(header, line.split(","), strict=False))
        if row.get("pxname") == "workers" and row.get("svname") not in (None, "BACKEND", "FRONTEND"):
            rows[row["svname"]] = row
    return rows


def haproxy_states(stats_socket: str) -> dict[str, str]:
    """Server name -> UP / DOWN / MAINT ... of the ``workers`` backend, from HAProxy's runtime API."""
    return {name: row["status"].split()[0] for name, row in haproxy_stats(stats_socket).items()}


@contextmanager
def affine_server(workers: int = 2, *overrides: str, target: str = COUNTER) -> Iterator[Affine]:
    """``ngym run TARGET --workers N [overrides]`` on a free port, its output in a file (never a full pipe)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ngym-affine-probe-") as tmp:
        log = Path(tmp) / "run.log"
        with log.open("wb") as out:
            cmd = [str(VENV_BIN / "ngym"), "run", target, *overrides, "--workers", str(workers), "--port", str(port)]
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        served = Affine(f"http://127.0.0.1:{port}", proc, log)
        try:
            wait_healthy(served.url, proc, 120, path="/")
            for i in range(workers):
                served.wait_state(f"w{i}", "UP")
            yield served
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


@dataclass
class Rollout:
    """One seeded counter session: its cookie, the worker that holds it, the count it must end at."""

    url: str
    cookie: str
    worker: str
    row: dict[str, object]
    expected: int
    statuses: list[int] = field(default_factory=list)

    def call(self, client: httpx.Client, path: str, body: object) -> httpx.Response:
        return client.post(f"{self.url}{path}", json=body, headers={"cookie": self.cookie})

    def increment(self, client: httpx.Client) -> httpx.Response:
        answer = self.call(client, "/increment_counter", {"count": 1})
        self.statuses.append(answer.status_code)
        if answer.status_code == 200:
            self.expected += 1
        return answer

    def verify(self, client: httpx.Client) -> dict[str, object]:
        answer = self.call(
            client, "/verify", {**self.row, "expected_count": self.expected, "response": make_response()}
        )
        assert answer.status_code == 200, answer.text
        return {**answer.json(), "worker": answer.headers.get("x-ngym-worker")}


def seed(client: httpx.Client, url: str, start: int) -> Rollout:
    row: dict[str, object] = {"responses_create_params": {"input": "count"}, "initial_count": start}
    answer = client.post(f"{url}/seed_session", json={**row, "expected_count": start})
    assert answer.status_code == 200, answer.text
    cookie = answer.headers["set-cookie"].split(";", 1)[0]
    return Rollout(url, cookie, answer.headers["x-ngym-worker"], row, start)


def idle_sessions(url: str, count: int, workers: int = 2) -> list[Rollout]:
    """``count`` live sessions, each incremented once, spread over every worker (asserted)."""
    with new_client() as client:
        rollouts = [seed(client, url, 100 + i) for i in range(count)]
        for rollout in rollouts:
            assert rollout.increment(client).status_code == 200
    assert {r.worker for r in rollouts} == {f"w{i}" for i in range(workers)}, [r.worker for r in rollouts]
    return rollouts


def verified_unmasked(rollouts: list[Rollout]) -> list[dict[str, object]]:
    """Each rollout's verify that was not scored 1.0 unmasked by the worker that seeded it (empty: all right)."""
    wrong = []
    with new_client() as client:
        for rollout in rollouts:
            result = rollout.verify(client)
            if result.get("reward") != 1.0 or result.get("mask_sample") or result["worker"] != rollout.worker:
                wrong.append({"seeded_on": rollout.worker, **result})
    return wrong


def flood(
    url: str, requests: int, shape: Callable[[int], tuple[str, str, dict[str, str], bytes]], threads: int = 8
) -> dict[int, int]:
    """``requests`` requests shaped by ``shape(i) -> (method, path, headers, body)`` on keep-alive connections;
    returns status -> count, and asserts none of them was answered with ``Set-Cookie``."""
    per_thread = -(-requests // threads)

    def run(t: int) -> tuple[dict[int, int], list[str]]:
        counts: dict[int, int] = {}
        cookies = []
        with new_client() as client:
            for i in range(t * per_thread, min(requests, (t + 1) * per_thread)):
                method, path, headers, body = shape(i)
                answer = client.request(method, f"{url}{path}", headers=headers, content=body or None)
                counts[answer.status_code] = counts.get(answer.status_code, 0) + 1
                if "set-cookie" in answer.headers:
                    cookies.append(f"{method} {path} {headers} {body[:80]!r} -> {answer.status_code}")
        return counts, cookies

    total: dict[int, int] = {}
    with ThreadPoolExecutor(threads) as pool:
        for counts, cookies in pool.map(run, range(threads)):
            assert not cookies, f"{len(cookies)} answers to the flood set a session cookie, e.g. {cookies[:3]}"
            for status, n in counts.items():
                total[status] = total.get(status, 0) + n
    return total


def junk_get(i: int) -> tuple[str, str, dict[str, str], bytes]:
    return "GET", f"/nonexistent/{i}", {}, b""


def churn(url: str, cycles: int, threads: int = 4) -> None:
    """``cycles`` ordinary rollouts (seed, one call, verify: the session closes) beside the idle ones."""

    def one(i: int) -> None:
        with new_client() as client:
            rollout = seed(client, url, i)
            rollout.increment(client)
            assert rollout.verify(client).get("reward") == 1.0

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(cycles)))


def stop_cont_probe(served: Affine, rollouts: list[Rollout], stopped: int = 1) -> list[dict[str, object]]:
    """STOP worker ``stopped`` until HAProxy counts it down; make one call per session: the others' sessions are
    answered 200 by their workers and a seed by a worker counted up, while the stopped worker's calls wait for it
    (HAProxy holds them in flight to it); CONT it: they are answered 200 by it. Returns the verifies that were not
    right and unmasked (empty: every session kept every call)."""
    name = f"w{stopped}"
    pid = served.worker_pid(stopped)
    mine = [r for r in rollouts if r.worker == name]
    os.kill(pid, signal.SIGSTOP)
    try:
        served.wait_state(name, "DOWN")
        with ThreadPoolExecutor(max(1, len(mine))) as pool:
            # one client per call, so each one waits on its own connection (a generous timeout: they wait for CONT)
            waiting = [pool.submit(_increment_alone, rollout) for rollout in mine]
            with new_client() as client:
                for rollout in rollouts:
                    if rollout.worker != name:
                        answer = rollout.increment(client)
                        assert answer.status_code == 200 and answer.headers["x-ngym-worker"] == rollout.worker
                assert seed(client, served.url, 0).worker != name  # a seed goes only to a worker counted up
            served.wait_in_flight(name, len(mine), waiting)
            answered = [call.result().status_code for call in waiting if call.done()]
            assert not answered, f"calls for a paused worker's sessions answered {answered}, not waiting for it"
            os.kill(pid, signal.SIGCONT)
            for call in waiting:
                answer = call.result(timeout=120)
                assert answer.status_code == 200, (answer.status_code, answer.text)
                assert answer.headers["x-ngym-worker"] == name and "set-cookie" in answer.headers
    finally:
        os.kill(pid, signal.SIGCONT)
    served.wait_state(name, "UP")
    return verified_unmasked(rollouts)


def _increment_alone(rollout: Rollout) -> httpx.Response:
    with httpx.Client(timeout=300, cookies=_NoJar()) as client:
        return rollout.increment(client)


__all__ = [
    "COOKIE",
    "COUNTER",
    "Affine",
    "Rollout",
    "affine_server",
    "churn",
    "new_client",
    "flood",
    "haproxy_states",
    "haproxy_stats",
    "idle_sessions",
    "junk_get",
    "seed",
    "stop_cont_probe",
    "verified_unmasked",
]
