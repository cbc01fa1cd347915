"""Caller-chosen session ids (NeMo Gym 0.7's typed seed/close): the id rule, safe cookies, bounded tombstones."""

from __future__ import annotations

import uuid

import httpx
import pytest

from ngym.server.sessions.cookies import CookieSigner
from ngym.server.sessions.ids import SessionIdRule
from ngym.server.sessions.store import MemorySessionStore
from ngym.testing import RolloutClient, app_for, serve_in_process

HOSTILE_IDS = ["a;b", "a,b", 'a"b', "a\tb", "café", "a\r\nX-Evil: 1", "x" * 9000, "a b", ""]


def typed_seed(session_id: str, rollout: str = "r1") -> dict:
    return {
        "resources_session_id": session_id,
        "episode_id": {"rollout_id": rollout, "attempt": 0},
        "task_id": {"taskset": "t", "task_id": "1"},
        "task_data": {"initial_count": 5},
    }


def typed_close(session_id: str, rollout: str = "r1") -> dict:
    return {"resources_session_id": session_id, "episode_id": {"rollout_id": rollout, "attempt": 0}}


async def live_sessions(http: httpx.AsyncClient) -> int:
    return (await http.get("/health")).json()["live_sessions"]


@pytest.mark.parametrize("session_id", HOSTILE_IDS)
async def test_a_hostile_id_is_422_naming_the_rule_and_creates_nothing(
    counter_http: httpx.AsyncClient, session_id: str
) -> None:
    seeded = await counter_http.post("/seed_session", json=typed_seed(session_id))
    assert seeded.status_code == 422, seeded.text
    error = seeded.json()["detail"][0]
    assert error["loc"][-1] == "resources_session_id"
    if session_id:  # the empty id fails the body model's own min_length
        assert "session_id_max_length" in error["msg"] and "session_id_pattern" in error["msg"]
        assert len(seeded.content) < 2000  # a 9000-character id is not echoed whole
    assert await live_sessions(counter_http) == 0
    assert (await counter_http.post("/close_session", json=typed_close(session_id))).status_code == 422


@pytest.mark.parametrize(
    "session_id",
    [
        f"resources-session-{uuid.uuid4().hex}",  # NeMo Gym's environment servers
        f"resources-session-{uuid.uuid4().hex}-never-seeded",  # its session conformance check
        str(uuid.uuid4()),
        "resources-session-0",
        "12-3-a1",  # a rollout id (task-rollout-attempt)
        "run.7:task_3/rollout@2+x=y~z",
    ],
)
async def test_what_nemo_gym_callers_send_is_accepted(counter_http: httpx.AsyncClient, session_id: str) -> None:
    rollout = RolloutClient(counter_http)
    assert (await rollout.call("/seed_session", typed_seed(session_id))) == {"resources_session_id": session_id}
    assert (await rollout.call("/get_counter_value")) == {"count": 5}
    assert (await counter_http.post("/close_session", json=typed_close(session_id))).status_code == 200


async def test_the_rule_is_configurable_and_the_cookie_stays_safe_whatever_it_allows() -> None:
    app = app_for("example_session_state_mgmt", session_id_max_length=12, session_id_pattern=r"[^\x00-\x1f]+")
    async with serve_in_process(app) as http:
        assert (await http.post("/seed_session", json=typed_seed("x" * 13))).status_code == 422
        for session_id in ["a;b", "a,b", 'a"b', "café", "a b%41"]:
            rollout = RolloutClient(http)
            assert (await rollout.call("/seed_session", typed_seed(session_id)))["resources_session_id"] == session_id
            assert rollout.cookie is not None
            value = rollout.cookie.split("=", 1)[1]
            assert value.isascii() and not set(value) & set(' ;,"\\\t'), value
            assert (await rollout.call("/increment_counter", {"count": 1})) == {"success": True}
            assert (await rollout.call("/get_counter_value")) == {"count": 6}


def test_cookie_values_are_cookie_octets_and_round_trip() -> None:
    signer = CookieSigner("s3cret", "sid")
    for session_id in ["abc", "a;b", "a,b", 'a"b', "a\tb", "é", "a%41", "a.b.c", "\r\n"]:
        value = signer.sign(session_id)
        assert all(0x21 <= ord(c) <= 0x7E and c not in '",;\\' for c in value), value
        assert CookieSigner("s3cret", "sid").unsign(value) == session_id  # fresh signer: no cache
    assert signer.sign("a%41") != signer.sign("aA")


def test_rule_messages() -> None:
    rule = SessionIdRule(max_length=8)
    assert rule.problem("abc-123") is None
    assert "9 characters" in (rule.problem("x" * 9) or "")
    assert "outside the allowed set" in (rule.problem("a;b") or "")
    assert "surrogate" in (SessionIdRule(pattern=".+").problem("a\ud800") or "")


async def test_closed_ids_are_bounded_in_count_and_never_keep_a_big_episode() -> None:
    app = app_for("example_session_state_mgmt", max_closed_sessions=3)
    async with serve_in_process(app) as http:
        huge_rollout = "r" * (1 << 20)
        for i in range(10):
            closed = await http.post("/close_session", json=typed_close(f"id-{i}", rollout=huge_rollout))
            assert closed.status_code == 200
        store = next(m.kwargs["sessions"] for m in app.user_middleware if "sessions" in m.kwargs).store
        assert isinstance(store, MemorySessionStore)
        assert list(store._closed) == ["id-7", "id-8", "id-9"]
        assert all(len(repr(meta)) < 100 for meta, _ in store._closed.values())  # a digest, not the rollout id
        # Still remembered: a late seed is refused; a close for another episode is a conflict.
        assert (await http.post("/seed_session", json=typed_seed("id-9", rollout=huge_rollout))).status_code == 409
        assert (await http.post("/close_session", json=typed_close("id-9", rollout="other"))).status_code == 409
        assert (await http.post("/close_session", json=typed_close("id-9", rollout=huge_rollout))).status_code == 200
        # The documented trade-off: past the bound the oldest id is forgotten and may be seeded again.
        assert (await http.post("/seed_session", json=typed_seed("id-0"))).status_code == 200


async def test_memory_store_tombstone_bound_is_its_own_setting() -> None:
    store = MemorySessionStore(ttl_seconds=60, max_sessions=2, max_closed=5)
    for i in range(20):
        await store.mark_closed(f"id-{i}", {"episode": "d"})
    assert len(store._closed) == 5 and await store.closed_meta("id-19") == {"episode": "d"}
    assert await store.closed_meta("id-14") is None
