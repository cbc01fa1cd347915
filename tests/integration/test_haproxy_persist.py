"""HAProxy as ``haproxy_config`` writes it for replicas on TCP addresses (a fleet across hosts, Ray replicas with a
``stride``): a request whose session id names a replica goes to it even while the checks count it down, and waits
for it; a replica whose connection is refused has its requests answered by another one; a slot that never came up
(disabled) has its ids balanced; one replica, dead: 503 at once (never a refused connection).

Real HAProxy; the replicas are small HTTP servers (what they answer is not what is tested: where HAProxy sends
each request is). Waits on HAProxy's own view of its servers (its runtime API), never on time.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from ngym.server.hosting.haproxy import Backend, haproxy_binary, haproxy_config
from ngym.server.sessions.routing import slot_of
from tests.support.affinity_probes import haproxy_stats

pytestmark = pytest.mark.skipif(
    (shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")) is None,
    reason="haproxy is not installed (apt-get install haproxy)",
)

STRIDE, COUNT = 3, 2  # these replicas are the inner level of a fleet routed by 3 outside them


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def listening() -> socket.socket:
    """A TCP socket listening on 127.0.0.1 that nothing accepts from yet (a paused replica: the kernel completes
    connections into its backlog, no answer comes)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@contextmanager
def serving(sock: socket.socket) -> Iterator[None]:
    """Answer 200 to every GET on ``sock`` until the block ends."""
    server = ThreadingHTTPServer(sock.getsockname(), _Answer, bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        thread.join(10)


def refused_port() -> int:
    """A port on 127.0.0.1 nothing listens on (a dead replica: its connection is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def proxy(backends: list[Backend]) -> Iterator[tuple[str, str]]:
    """HAProxy with ngym's configuration over ``backends``: (its URL, its runtime API socket)."""
    public = socket.socket()
    public.bind(("127.0.0.1", 0))
    public.listen(64)
    public.set_inheritable(True)
    with tempfile.TemporaryDirectory(prefix="ngym-persist-") as work, public:
        stats = str(Path(work) / "haproxy.sock")
        config = Path(work) / "haproxy.cfg"
        text = haproxy_config(
            listen_fd=public.fileno(), backends=backends, cookie_name="ngym_session", stats_socket=stats, stride=STRIDE
        )
        config.write_text(text)
        process = subprocess.Popen(
            [haproxy_binary(), "-db", "-f", str(config)], pass_fds=(public.fileno(),), stderr=subprocess.DEVNULL
        )
        try:
            wait(lambda: Path(stats).exists())
            yield f"http://127.0.0.1:{public.getsockname()[1]}", stats
        finally:
            process.terminate()
            process.wait(10)


def wait(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def state(stats: str, name: str) -> str:
    return haproxy_stats(stats)[name]["status"].split()[0]


def key_for(slot: int) -> str:
    """A session id routed to ``slot`` of ``COUNT`` behind ``STRIDE``."""
    return next(k for k in (f"roll-{i}" for i in range(1000)) if slot_of(k, COUNT, STRIDE) == slot)


def get(url: str, slot: int, timeout: float = 60) -> httpx.Response:
    return httpx.get(f"{url}/ng-rollout/{key_for(slot)}/get_counter_value", timeout=timeout)


def test_a_down_replica_still_gets_its_sessions_and_only_a_refused_one_redispatches() -> None:
    live, paused = listening(), listening()
    with live, paused, serving(live):
        backends = [Backend("r0", *live.getsockname()), Backend("r1", *paused.getsockname())]
        with proxy(backends) as (url, stats):
            wait(lambda: state(stats, "r1") == "DOWN")  # its checks time out: nothing answers them
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(get, url, 1, 120)
                wait(lambda: int(haproxy_stats(stats)["r1"]["scur"] or 0) >= 1 or waiting.done())
                assert not waiting.done(), waiting.result().status_code  # it waits for its replica
                assert get(url, 0).headers["x-ngym-worker"] == "r0"
                assert httpx.get(f"{url}/seed_session", timeout=10).headers["x-ngym-worker"] == "r0"  # no key
                with serving(paused):
                    answer = waiting.result(timeout=60)
                    assert answer.status_code == 200 and answer.headers["x-ngym-worker"] == "r1"

        # a replica that refuses (dead): its sessions' requests are answered by the other one
        dead = Backend("r1", "127.0.0.1", refused_port())
        with proxy([backends[0], dead]) as (url, stats):
            answer = get(url, 1)
            assert answer.status_code == 200 and answer.headers["x-ngym-worker"] == "r0"
            wait(lambda: state(stats, "r1") == "DOWN")
            assert get(url, 1).headers["x-ngym-worker"] == "r0"

        # a slot that never came up: its ids go to a replica that did
        never = Backend("r1", "127.0.0.1", 1, disabled=True)
        with proxy([backends[0], never]) as (url, _stats):
            assert get(url, 1).headers["x-ngym-worker"] == "r0"

    # no replica left (the ray engine's front over one replica whose node died, or over two): 503 at once, an
    # HTTP answer (never a refused connection)
    for count in (1, 2):
        with proxy([Backend(f"r{i}", "127.0.0.1", refused_port()) for i in range(count)]) as (url, stats):
            wait(lambda: {row["status"].split()[0] for row in haproxy_stats(stats).values()} == {"DOWN"})
            assert get(url, 1).status_code == get(url, 0).status_code == 503
