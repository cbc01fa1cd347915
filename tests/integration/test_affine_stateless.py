"""Stateless session affinity of ``ngym run NAME --workers 2`` (in-process state behind HAProxy): no traffic can
move or evict a live session's route, an answer never re-pins one, and the worker that holds a session is the
only one that acts on it.

Real processes: the supervisor, two single-worker processes and Debian's HAProxy (``.ci/run`` installs it; under
CI=true a missing binary fails instead of skipping). The junk flood, session churn and stopped workers are probed
by ``make fuzz`` (``tests/fuzz/test_fuzz_affinity.py``: 20,000 requests of every shape of junk, 1,000 churn cycles,
each worker stopped and continued), which CI runs beside this.
"""

from __future__ import annotations

import shutil

import pytest

from tests.support.affinity_probes import (
    COOKIE,
    affine_server,
    haproxy_states,
    new_client,
    seed,
    verified_unmasked,
)

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")


def test_two_session_cookies_are_400_and_only_a_seed_hands_out_a_cookie() -> None:
    with affine_server(2) as served, new_client() as http:
        a, b = seed(http, served.url, 1), seed(http, served.url, 2)
        repeated = a.increment(http).headers.get("set-cookie", "")  # a tool's answer repeats the session's own cookie
        assert repeated.split(";")[0] == a.cookie
        for cookie in (f"{a.cookie}; {b.cookie}", f"{a.cookie}; {a.cookie}", f"x=1; {b.cookie}; {a.cookie}"):
            answer = http.post(f"{served.url}/increment_counter", json={"count": 1}, headers={"cookie": cookie})
            assert answer.status_code == 400 and "more than one" in answer.json()["detail"], answer.text
            assert "set-cookie" not in answer.headers
        missing = http.post(f"{served.url}/nonexistent", json={}, headers={"cookie": a.cookie})
        assert missing.status_code == 404 and "set-cookie" not in missing.headers
        # a session cookie the server does not hold (signed elsewhere: a forged one reads as no session at all)
        gone = http.post(f"{served.url}/increment_counter", json={"count": 1}, headers={"cookie": f"{COOKIE}=u0.x"})
        assert "set-cookie" not in gone.headers
        assert a.verify(http)["reward"] == 1.0  # a's session was closed by its verify
        lost = a.increment(http)
        assert lost.status_code == 410 and "set-cookie" not in lost.headers
        assert verified_unmasked([b]) == []


def test_a_typed_close_is_honoured_only_by_the_worker_holding_the_session() -> None:
    with affine_server(2) as served, new_client() as http:
        typed = {
            "resources_session_id": "typed-close-1",
            "episode_id": {"rollout_id": "r1", "attempt": 0},
            "task_id": {"taskset": "t", "task_id": "1"},
            "task_data": {"initial_count": 5},
        }
        seeded = http.post(f"{served.url}/seed_session", json=typed)
        assert seeded.status_code == 200, seeded.text
        holder, typed_cookie = seeded.headers["x-ngym-worker"], seeded.headers["set-cookie"].split(";")[0]
        other = seed(http, served.url, 1)
        for _ in range(20):  # a session on the other worker (least connections: the next seed or two)
            if other.worker != holder:
                break
            other = seed(http, served.url, 1)
        assert other.worker != holder
        close = {k: typed[k] for k in ("resources_session_id", "episode_id")}
        closed = http.post(f"{served.url}/close_session", json=close, headers={"cookie": other.cookie})
        assert closed.status_code == 200 and closed.headers["x-ngym-worker"] == holder, closed.text
        # really closed where it lived: its cookie is a lost session now, and the id cannot be seeded again
        after = http.post(f"{served.url}/increment_counter", json={"count": 1}, headers={"cookie": typed_cookie})
        assert after.status_code == 410, after.text
        assert http.post(f"{served.url}/seed_session", json=typed).status_code == 409
        assert verified_unmasked([other]) == []


def test_haproxy_routes_every_key_to_the_slot_the_workers_compute() -> None:
    """The generated configuration (real HAProxy, stub backends that say who they are) routes the cookie's id, the
    typed body's id and the rollout prefix to ``slot_of`` of that id, at an outer level and at a nested one."""
    import json
    import socket
    import subprocess
    import tempfile
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    from ngym.server.hosting.haproxy import Backend, haproxy_config
    from ngym.server.sessions.routing import RouteSlot, slot_of

    def _states(path: str) -> dict[str, str]:
        try:
            return haproxy_states(path)
        except OSError:  # HAProxy not listening on it yet
            return {}

    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        do_GET = do_POST  # HAProxy's health check

    class Quiet(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # HAProxy closing a health check's connection early

    stubs = [Quiet(("127.0.0.1", 0), Echo) for _ in range(3)]
    for stub in stubs:
        threading.Thread(target=stub.serve_forever, daemon=True).start()
    assert HAPROXY is not None
    try:
        for stride in (1, 2):  # the outermost set, and a set nested in an outer one of 2 (a replica's workers)
            public = socket.socket()
            public.bind(("127.0.0.1", 0))
            public.listen()
            public.set_inheritable(True)
            backends = [Backend(f"w{i}", "127.0.0.1", s.server_address[1]) for i, s in enumerate(stubs)]
            with tempfile.TemporaryDirectory() as tmp:
                config = Path(tmp) / "haproxy.cfg"
                stats = str(Path(tmp) / "stats.sock")
                config.write_text(
                    haproxy_config(
                        listen_fd=public.fileno(),
                        backends=backends,
                        cookie_name=COOKIE,
                        stride=stride,
                        stats_socket=stats,
                    )
                )
                text = config.read_text()  # nothing learned from answers or requests: no table at all
                assert "store-response" not in text and "stick" not in text
                proxy = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], pass_fds=(public.fileno(),))
                url = f"http://127.0.0.1:{public.getsockname()[1]}"
                try:
                    with new_client() as http:
                        deadline = time.monotonic() + 30
                        while set(_states(stats).values()) != {"UP"}:  # until every backend passed its checks
                            assert time.monotonic() < deadline, _states(stats)
                            time.sleep(0.1)
                        ids = [RouteSlot(((i % 2, 2), (i % 3, 3))).new_id() for i in range(12)]
                        ids += ["typed-1", "a.b.c", "x_y-z", "12-3-a1", "resources-session-0f0f"]
                        for sid in ids:
                            want = f"w{slot_of(sid, 3, stride)}"
                            cookie = {"cookie": f"{COOKIE}={sid}.c2lnbmF0dXJl; other=1"}
                            stray_cookie = {"cookie": f"{COOKIE}=other-{sid}.c2lnbmF0dXJl"}
                            typed = json.dumps({"resources_session_id": sid, "episode_id": {"rollout_id": "r"}})
                            answers = [
                                http.post(f"{url}/increment_counter", headers=cookie),
                                http.post(f"{url}/seed_session", content=typed, headers={"cookie": f"{COOKIE}=z.t"}),
                                http.post(f"{url}/ng-rollout/{sid}/get_counter_value"),
                                http.post(f"{url}/call", headers={"x-session-id": sid}),  # an ORS session's request
                                http.post(f"{url}/ors/call", headers={"x-session-id": sid, **stray_cookie}),
                                # ORS's request with its header twice: the first, the one the server reads
                                http.post(f"{url}/call", headers=[("x-session-id", sid), ("x-session-id", "x")]),
                                # a stray X-Session-ID (a gateway's tracing header) beside the cookie, on a route
                                # that is not ORS's: the server reads the cookie, so the proxy does too
                                http.post(f"{url}/increment_counter", headers={**cookie, "x-session-id": f"t-{sid}"}),
                            ]
                            assert [a.headers["x-ngym-worker"] for a in answers] == [want] * 7, sid
                finally:
                    proxy.terminate()
                    proxy.wait(10)
                    public.close()
    finally:
        for stub in stubs:
            stub.shutdown()
