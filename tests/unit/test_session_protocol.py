"""The session protocol of ``SessionManager``, without HTTP: typed seed and close, rebind, no resurrection.

The routes only parse and call these; the HTTP behaviour is in test_sessions_http.py and test_session_ids.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ngym.server.sessions.cookies import CookieSigner
from ngym.server.sessions.manager import SESSION_ID_KEY, RequestSession, SessionConflict, SessionManager
from ngym.server.sessions.store import MemorySessionStore, SessionLimitReached

EPISODE = {"rollout_id": "r1", "attempt": 0}
OTHER = {"rollout_id": "r2", "attempt": 0}
TASK = {"taskset": "t", "task_id": "1"}


class Hooks:
    def __init__(self) -> None:
        self.closed: list[tuple[str, Any]] = []

    async def on_closed(self, session_id: str, state: Any) -> None:
        self.closed.append((session_id, state))


def manager(max_sessions: int = 10) -> tuple[SessionManager, Hooks]:
    hooks = Hooks()
    store = MemorySessionStore(ttl_seconds=60, max_sessions=max_sessions)
    return SessionManager(store, CookieSigner("k" * 32, "ngym_session"), hooks.on_closed), hooks


def fresh() -> RequestSession:
    return RequestSession("cookie-id", None, is_new=True)


async def seed_state(session: RequestSession, state: Any) -> str:
    assert session.record is not None
    session.record.state = state
    return "seeded"


async def test_a_typed_seed_binds_the_request_and_its_view_to_the_id() -> None:
    sessions, _ = manager()
    session = fresh()
    result, seeded = await sessions.seed_typed(session, "s-1", EPISODE, TASK, lambda: seed_state(session, 1))
    assert (result, seeded) == ("seeded", True)
    assert session.id == "s-1" and session.view == {SESSION_ID_KEY: "s-1"} and session.is_new
    record = await sessions.store.load("s-1")
    assert record is not None and record.state == 1 and record.meta["episode_id"] == EPISODE


async def test_a_repeated_typed_seed_is_idempotent_and_does_not_seed_again() -> None:
    sessions, _ = manager()
    calls = []

    async def seed() -> str:
        calls.append(1)
        return "seeded"

    await sessions.seed_typed(fresh(), "s-1", EPISODE, TASK, seed)
    again = fresh()
    assert await sessions.seed_typed(again, "s-1", EPISODE, TASK, seed) == (None, False)
    assert calls == [1] and again.id == "s-1" and again.record is not None
    with pytest.raises(SessionConflict, match="another episode"):
        await sessions.seed_typed(fresh(), "s-1", OTHER, TASK, seed)


async def test_no_resurrection_after_a_close_even_of_a_never_seeded_id() -> None:
    sessions, hooks = manager()
    session = fresh()
    await sessions.seed_typed(session, "s-1", EPISODE, TASK, lambda: seed_state(session, "x"))
    assert await sessions.close_typed("s-1", EPISODE) == (None, True)
    assert hooks.closed == [("s-1", "x")]
    assert await sessions.close_typed("s-1", EPISODE) == (None, False)  # idempotent: the hook ran once
    assert hooks.closed == [("s-1", "x")]
    await sessions.close_typed("never", EPISODE)
    for session_id in ("s-1", "never"):
        with pytest.raises(SessionConflict, match="cannot be seeded again"):
            await sessions.seed_typed(fresh(), session_id, EPISODE, TASK, lambda: seed_state(session, "y"))
    with pytest.raises(SessionConflict, match="closed for another episode"):
        await sessions.close_typed("s-1", OTHER)


async def test_a_close_for_another_episode_of_a_live_id_is_refused_and_closes_nothing() -> None:
    sessions, hooks = manager()
    session = fresh()
    await sessions.seed_typed(session, "s-1", EPISODE, TASK, lambda: seed_state(session, 1))
    with pytest.raises(SessionConflict, match="belongs to another episode"):
        await sessions.close_typed("s-1", OTHER)
    assert await sessions.store.load("s-1") is not None and hooks.closed == []


async def test_a_release_that_fails_records_nothing_so_the_close_can_be_retried() -> None:
    sessions, hooks = manager()
    session = fresh()
    await sessions.seed_typed(session, "s-1", EPISODE, TASK, lambda: seed_state(session, 1))

    async def failing() -> None:
        raise RuntimeError("sandbox did not stop")

    with pytest.raises(RuntimeError):
        await sessions.close_typed("s-1", EPISODE, failing)
    assert await sessions.store.closed_meta("s-1") is None and hooks.closed == []

    async def release() -> str:
        return "released"

    assert await sessions.close_typed("s-1", EPISODE, release) == ("released", True)
    assert hooks.closed == [("s-1", 1)]


async def test_a_seed_racing_a_close_of_the_same_id_is_a_conflict_not_a_resurrection() -> None:
    sessions, _ = manager()
    gate = asyncio.Event()

    async def slow_release() -> None:
        await gate.wait()

    closing = asyncio.create_task(sessions.close_typed("s-1", EPISODE, slow_release))
    await asyncio.sleep(0)
    session = fresh()
    with pytest.raises(SessionConflict, match="being seeded or closed"):
        await sessions.seed_typed(session, "s-1", EPISODE, TASK, lambda: seed_state(session, 1))
    gate.set()
    await closing
    with pytest.raises(SessionConflict, match="cannot be seeded again"):
        await sessions.seed_typed(session, "s-1", EPISODE, TASK, lambda: seed_state(session, 1))


async def test_a_failed_typed_seed_leaves_the_request_on_its_own_session_and_admits_nothing() -> None:
    sessions, _ = manager()
    session = fresh()

    async def failing() -> None:
        raise ValueError("bad task_data")

    with pytest.raises(ValueError):
        await sessions.seed_typed(session, "s-1", EPISODE, TASK, failing)
    assert (session.id, session.record, session.view) == ("cookie-id", None, {SESSION_ID_KEY: "cookie-id"})
    assert await sessions.store.load("s-1") is None


async def test_a_row_seed_on_a_live_cookie_restarts_under_a_fresh_id() -> None:
    sessions, hooks = manager()
    first = fresh()
    await sessions.seed_row(first, lambda: seed_state(first, "old"))
    again = RequestSession(first.id, await sessions.store.load(first.id), is_new=False)
    await sessions.seed_row(again, lambda: seed_state(again, "new"))
    assert hooks.closed == [(first.id, "old")]
    assert again.id != first.id and again.view[SESSION_ID_KEY] == again.id
    record = await sessions.store.load(again.id)
    assert record is not None and record.state == "new"


async def test_a_full_store_refuses_a_seed_before_it_runs() -> None:
    sessions, _ = manager(max_sessions=1)
    session = fresh()
    await sessions.seed_row(session, lambda: seed_state(session, 1))
    ran = []

    async def seed() -> None:
        ran.append(1)

    with pytest.raises(SessionLimitReached):
        await sessions.seed_typed(fresh(), "s-2", EPISODE, TASK, seed)
    assert ran == []


def test_only_a_held_session_is_closed_after_the_response() -> None:
    """``close_after_response`` is the one place that decides it: a request with no session held (never seeded or
    loaded) has nothing to free, so it asks nothing of the middleware."""
    from ngym.server.sessions.store import SessionRecord

    unheld = fresh()
    unheld.close_after_response()
    assert unheld.close_requested is False
    held = RequestSession("cookie-id", SessionRecord(state={"n": 1}), is_new=False)
    held.close_after_response()
    assert held.close_requested is True
