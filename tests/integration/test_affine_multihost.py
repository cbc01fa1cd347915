"""Replicas of a stateful environment on three "hosts" (network namespaces on one bridge, :mod:`tests.netns`)
behind one HAProxy configured as ``ngym run --workers`` configures it (host I is routing slot I: a request goes to
the host its session id hashes to); one host is killed mid-run.

Every rollout whose host survives scores right; every rollout of the dead host ends loudly (a tool call 410 or a
proxy 502/503, or a verify masked ``session_lost``), never with a wrong reward, and none hangs. Needs root and
``ip`` (iproute2) and HAProxy; ``.ci/run`` runs as root with both installed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ngym.child_server import wait_healthy
from ngym.server.hosting.haproxy import Backend, haproxy_config
from ngym.server.sessions.routing import ROUTE_SLOT_ENV
from tests.integration.conftest import VENV_BIN
from tests.integration.test_affine_workers import HAPROXY, counter_rollout
from tests.netns import Hosts

pytestmark = pytest.mark.skipif(
    HAPROXY is None or shutil.which("ip") is None or os.geteuid() != 0,
    reason="needs root, iproute2 (ip netns) and haproxy",
)

HOSTS = ["h0", "h1", "h2"]
PORT = 8000


def test_a_host_killed_mid_run_loses_only_its_rollouts_and_loudly() -> None:
    secret = secrets.token_urlsafe(32)
    env = {**os.environ, "NGYM_SESSION_SECRET": secret}
    # a prefix and subnet of this run's own: a second run at once (another checkout) neither sees nor removes them
    with Hosts.for_this_run("mh", HOSTS) as made, tempfile.TemporaryDirectory(prefix="ngym-multihost-") as work:
        machines = [(name, made.address(name)) for name in HOSTS]
        replicas = []
        for slot, (ns, address) in enumerate(machines):
            cmd = [*made.exec_argv(ns), str(VENV_BIN / "ngym"), "run", "example_session_state_mgmt"]
            log = open(Path(work) / f"{ns}.log", "w")  # noqa: SIM115 - closed with the process
            # host I is routing slot I of 3, as backend wI of the HAProxy below: the ids it makes route back to it
            own = {**env, ROUTE_SLOT_ENV: f"{slot}/{len(machines)}"}
            proc = subprocess.Popen([*cmd, "--host", address, "--port", str(PORT)], env=own, stdout=log, stderr=log)
            replicas.append((proc, log))
        for (proc, _), (_ns, address) in zip(replicas, machines, strict=True):
            wait_healthy(f"http://{address}:{PORT}", proc, 90, path="/livez")

        public = socket.socket()
        public.bind(("127.0.0.1", 0))
        public.listen(128)  # listening before HAProxy starts: an early request waits for it instead of being refused
        public.set_inheritable(True)
        config = Path(work) / "haproxy.cfg"
        backends = [Backend(f"w{i}", address, PORT) for i, (_ns, address) in enumerate(machines)]
        config.write_text(
            haproxy_config(
                listen_fd=public.fileno(),
                backends=backends,
                cookie_name="ngym_session",
                session_ttl_seconds=3600,
                max_sessions=10_000,
            )
        )
        assert HAPROXY is not None
        proxy = subprocess.Popen(
            [HAPROXY, "-db", "-f", str(config)], pass_fds=(public.fileno(),), stderr=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{public.getsockname()[1]}"
        try:
            # Until HAProxy's first health checks have put every host in (a fixed sleep was sometimes too short):
            # warm rollouts until each host has served one, bounded.
            served: set[object] = set()
            for attempt in range(600):
                served.add(counter_rollout(url, 200 + attempt, 1).get("worker"))
                if {f"w{i}" for i in range(len(machines))} <= served:
                    break
                time.sleep(0.1)
            else:
                raise AssertionError(f"HAProxy never routed to every host: {served}")
            warm = [counter_rollout(url, i) for i in range(6)]
            assert all(r.get("reward") == 1.0 for r in warm), warm

            # Every rollout seeds, then waits for the kill before its tool calls and verify: each is in flight on its
            # host when the host dies, whatever the machine's speed (a fixed sleep before the kill was not).
            from ngym.testing import make_response
            from tests.integration.conftest import HandCookieClient

            rollouts = 36
            seeded = threading.Semaphore(0)
            host_killed = threading.Event()

            def in_flight_at_the_kill(i: int, steps: int = 5) -> dict[str, object]:
                client = HandCookieClient(url)
                row = {"responses_create_params": {"input": "count"}, "initial_count": i, "expected_count": i + steps}
                try:
                    seed = client.post("/seed_session", row)
                finally:
                    seeded.release()
                worker = seed.headers.get("x-ngym-worker", "?")
                if seed.status_code != 200:
                    return {"worker": worker, "seed_status": seed.status_code}
                host_killed.wait(120)
                for _ in range(steps):
                    step = client.post("/increment_counter", {"count": 1})
                    if step.status_code != 200:
                        return {"worker": worker, "tool_status": step.status_code}
                verified = client.post("/verify", {**row, "response": make_response()})
                answer = verified.json() if verified.is_success else {}
                return {"worker": worker, "verify_status": verified.status_code, **answer}

            with ThreadPoolExecutor(rollouts) as pool:
                running = [pool.submit(in_flight_at_the_kill, i) for i in range(rollouts)]
                for _ in range(rollouts):  # every rollout has its session (bounded: a seed that hangs fails here)
                    assert seeded.acquire(timeout=90), "a seed did not answer"
                made.kill(machines[0][0])
                host_killed.set()
                results = [f.result(timeout=90) for f in running]  # bounded: a rollout that hangs fails here
            dead = "w0"
            for r in results:
                if r.get("seed_status") in (502, 503) and r["worker"] in (dead, "?"):
                    continue  # seeded as the host died: the proxy's 502, the rollout never started
                if r["worker"] != dead:
                    assert r.get("reward") == 1.0 and not r.get("mask_sample"), r
                elif r.get("reward") == 1.0:
                    continue  # finished before the kill
                else:
                    assert (
                        r.get("tool_status") in (410, 502, 503)
                        or r.get("verify_status") in (502, 503)
                        or (r.get("mask_sample") is True and r.get("failure_kind") == "session_lost")
                    ), r
            lost = [r for r in results if r["worker"] == dead and r.get("reward") != 1.0]
            assert lost, "no rollout was on the killed host mid-run"
            after = [counter_rollout(url, 100 + i) for i in range(6)]  # the survivors serve new rollouts
            assert all(r.get("reward") == 1.0 and r["worker"] != dead for r in after), after
        finally:
            proxy.terminate()
            proxy.wait(10)
            for proc, log in replicas:
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(10)
                log.close()
