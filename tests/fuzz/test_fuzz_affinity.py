"""Session affinity under hostile and heavy traffic (``make fuzz``): ``ngym run example_session_state_mgmt
--workers 2`` behind its real HAProxy, 20 idle live sessions beside a flood of junk of many shapes, session churn
with a small ``max_sessions``, and every worker stopped and continued in turn.

Whatever the traffic, every idle session still verifies unmasked with the right reward on the worker that seeded
it, no junk answer hands out a session cookie, and two session cookies are always 400. The budget is set by
``NGYM_FUZZ_FLOOD`` (junk requests, default 20,000) and ``NGYM_FUZZ_CHURN`` (seed/verify cycles, default 1,000);
the seed by ``NGYM_FUZZ_SEED``. Waits are on HAProxy's own view of its workers (its runtime API), never on time.
"""

from __future__ import annotations

import json
import os
import random
import shutil

import pytest

from ngym.server.sessions.cookies import CookieSigner
from tests.support.affinity_probes import (
    COOKIE,
    affine_server,
    churn,
    flood,
    idle_sessions,
    stop_cont_probe,
    verified_unmasked,
)

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)"),
]

FLOOD = int(os.environ.get("NGYM_FUZZ_FLOOD", "20000"))
CHURN = int(os.environ.get("NGYM_FUZZ_CHURN", "1000"))
SEED = int(os.environ.get("NGYM_FUZZ_SEED", "32"))


def junk_shapes(live_cookies: list[str]) -> tuple[object, dict[int, int]]:
    """A ``flood`` shape drawing from many kinds of junk; the expected-status tally is filled as it draws."""
    rng = random.Random(SEED)
    forger = CookieSigner("not-the-servers-secret", COOKIE)
    drawn: dict[int, int] = {}

    def shape(i: int) -> tuple[str, str, dict[str, str], bytes]:
        local = random.Random(rng.random() + i)
        kind = i % 8
        drawn[kind] = drawn.get(kind, 0) + 1
        token = "".join(local.choice("abcdef0123456789-_.") for _ in range(local.randint(1, 40)))
        if kind == 0:  # paths that do not exist, any method
            return local.choice(["GET", "POST", "DELETE", "PUT"]), f"/nonexistent/{token}", {}, b""
        if kind == 1:  # a tool without any session
            return "POST", "/increment_counter", {"content-type": "application/json"}, b'{"count": 1}'
        if kind == 2:  # forged or garbage cookies
            value = local.choice([forger.sign(token), token, f"{token}.{token}", ""])
            return "POST", "/get_counter_value", {"cookie": f"{COOKIE}={value}"}, b"{}"
        if kind == 3:  # rollout prefixes of any id
            return "POST", f"/ng-rollout/{token}/get_counter_value", {}, b"{}"
        if kind == 4:  # a typed close of an id nobody seeded (remembered, bounded), any episode
            body = {"resources_session_id": token.strip(".") or "x", "episode_id": {"rollout_id": token, "attempt": 0}}
            return "POST", "/close_session", {"content-type": "application/json"}, json.dumps(body).encode()
        if kind == 5:  # bodies that are not JSON or not objects (a seed's: a row seed with defaults is a real seed)
            body = local.choice([b"{", b"[]", b'"x"', b'{"resources_session_id": 7}', b"\xff\xfe", b"{}" * 500])
            path = "/seed_session" if body[:1] != b"{" or body == b"{" else local.choice(["/close_session", "/verify"])
            return "POST", path, {}, body
        if kind == 6:  # a live session's cookie twice, or beside another's: always 400, never a re-pin
            first, second = local.choice(live_cookies), local.choice(live_cookies)
            return "POST", "/increment_counter", {"cookie": f"{first}; other=1; {second}"}, b'{"count": 1}'
        # a live cookie on a path that does not exist
        return "GET", f"/{token}", {"cookie": local.choice(live_cookies)}, b""

    return shape, drawn


def test_no_junk_traffic_or_churn_moves_or_evicts_an_idle_live_session() -> None:
    with affine_server(2, "max_sessions=60", "session_ttl_seconds=3600") as served:
        idle = idle_sessions(served.url, 20)
        shape, drawn = junk_shapes([r.cookie for r in idle])
        statuses = flood(served.url, FLOOD, shape)  # asserts no answer handed out a cookie
        assert sum(statuses.values()) == FLOOD
        assert not {s for s in statuses if s >= 500 and s != 503}, statuses  # never a server error
        assert statuses.get(400, 0) >= drawn.get(6, 0)  # every duplicate cookie refused
        churn(served.url, CHURN)
        assert verified_unmasked(idle) == []


def test_every_worker_stopped_and_continued_keeps_its_sessions() -> None:
    with affine_server(2) as served:
        for stopped in (0, 1, 0):
            idle = idle_sessions(served.url, 20)
            assert stop_cont_probe(served, idle, stopped) == []
