"""``ngym status`` for an environment whose replicas sit behind a router (the ray engine's HAProxy): each replica
is read and the counts summed, and a replica that does not answer is counted out, not hidden behind the router's
answer from a surviving one."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ngym.fleet.state import FleetState, ReplicaRecord, ServerRecord
from ngym.fleet.status import fleet_status


def serve(body: dict[str, Any], status: int = 200) -> ThreadingHTTPServer:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def servers() -> Iterator[list[ThreadingHTTPServer]]:
    made = [
        serve({"status": "ok", "live_sessions": 3, "traffic": {"verified": 10, "server_errors": 1}}),  # the router
        serve({"status": "ok", "live_sessions": 3, "traffic": {"verified": 10, "server_errors": 1}}),  # replica 0
        serve({"status": "ok", "live_sessions": 5, "traffic": {"verified": 7, "server_errors": 0}}),  # replica 1
    ]
    yield made
    for server in made:
        server.shutdown()
        server.server_close()


def state_of(servers: list[ThreadingHTTPServer], dead_port: int | None = None) -> FleetState:
    router, *replicas = (s.server_address[1] for s in servers)
    ports = [*replicas, *([dead_port] if dead_port else [])]
    record = ServerRecord(
        kind="environment",
        host="127.0.0.1",
        port=int(router),
        ok=True,
        replicas=[ReplicaRecord(host="127.0.0.1", port=int(p), ok=True) for p in ports],
    )
    head = ServerRecord(kind="head", host="127.0.0.1", port=int(router), ok=True)
    return FleetState(name="f", engine="ray", head=head, servers={"counter": record})


def test_replicas_behind_a_router_are_summed(servers: list[ThreadingHTTPServer]) -> None:
    (row,) = [r for r in fleet_status(state_of(servers), interval=0) if r.name == "counter"]
    assert (row.live_sessions, row.verified, row.errors) == (8, 17, 1)
    assert row.reason.startswith("2/2 replicas answer")


def test_a_replica_that_does_not_answer_is_counted_out(servers: list[ThreadingHTTPServer]) -> None:
    dead = serve({})
    port = int(dead.server_address[1])
    dead.shutdown()
    dead.server_close()
    (row,) = [r for r in fleet_status(state_of(servers, dead_port=port), interval=0) if r.name == "counter"]
    assert row.health == "ok" and row.live_sessions == 8
    assert row.reason.startswith("2/3 replicas answer")


def test_one_replica_behind_a_router_is_read_through_it(servers: list[ThreadingHTTPServer]) -> None:
    # the ray engine puts even one replica behind HAProxy: its row says how many replicas answer
    (row,) = [r for r in fleet_status(state_of(servers[:2]), interval=0) if r.name == "counter"]
    assert row.health == "ok" and row.live_sessions == 3
    assert row.reason.startswith("1/1 replicas answer")


def test_a_router_with_no_replica_left_reads_down() -> None:
    # HAProxy answers 503 once its only replica's node is lost: the environment is down, not "unhealthy"
    router = serve({}, status=503)
    dead = serve({})
    port = int(dead.server_address[1])
    dead.shutdown()
    dead.server_close()
    try:
        state = state_of([router], dead_port=port)
        (row,) = [r for r in fleet_status(state, interval=0) if r.name == "counter"]
        assert row.health == "down"
    finally:
        router.shutdown()
        router.server_close()
