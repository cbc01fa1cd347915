"""MemorySessionStore: lifecycle, bound, idle expiry in LRU order, bounded tombstones, no growth."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from ngym.server.sessions.store import MemorySessionStore, SessionLimitReached, SessionRecord


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_create_load_remove() -> None:
    store = MemorySessionStore(ttl_seconds=10, max_sessions=10)
    await store.create("a", SessionRecord(state={"n": 1}))
    record = await store.load("a")
    assert record is not None and record.state == {"n": 1}
    assert (await store.remove("a")) is record
    assert await store.remove("a") is None
    assert await store.load("a") is None


async def test_bound_raises_and_frees() -> None:
    store = MemorySessionStore(ttl_seconds=10, max_sessions=2)
    await store.create("a", SessionRecord())
    await store.create("b", SessionRecord())
    with pytest.raises(SessionLimitReached):
        await store.create("c", SessionRecord())
    await store.remove("a")
    await store.create("c", SessionRecord())
    assert await store.count() == 2


async def test_expiry_follows_last_use_not_creation() -> None:
    clock = Clock()
    store = MemorySessionStore(ttl_seconds=10, max_sessions=10, clock=clock)
    await store.create("old", SessionRecord())
    clock.now = 5
    await store.create("new", SessionRecord())
    clock.now = 9
    await store.load("old")  # touched: now the most recently used
    clock.now = 16
    expired = await store.pop_expired()
    assert [sid for sid, _ in expired] == ["new"]
    clock.now = 30
    assert [sid for sid, _ in await store.pop_expired()] == ["old"]
    assert await store.count() == 0


async def test_tombstones_are_bounded_and_expire() -> None:
    clock = Clock()
    store = MemorySessionStore(ttl_seconds=10, max_sessions=3, clock=clock)
    for i in range(5):
        await store.mark_closed(f"s{i}", {"episode_id": i})
    assert await store.closed_meta("s0") is None  # evicted by the bound
    assert await store.closed_meta("s4") == {"episode_id": 4}
    clock.now = 11
    await store.pop_expired()
    assert await store.closed_meta("s4") is None


async def test_drain_returns_everything() -> None:
    store = MemorySessionStore(ttl_seconds=10, max_sessions=10)
    for name in "abc":
        await store.create(name, SessionRecord(state=name))
    assert sorted(state.state for _, state in await store.drain()) == ["a", "b", "c"]
    assert await store.count() == 0


async def test_many_sessions_created_and_removed_leave_no_memory_behind() -> None:
    store = MemorySessionStore(ttl_seconds=10, max_sessions=1_000_000)
    for i in range(1000):  # warm-up: dict resizing, interned ids
        await store.create(f"w{i}", SessionRecord(state=[0] * 10))
        await store.remove(f"w{i}")
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    for i in range(50_000):
        sid = f"{i:032x}"
        await store.create(sid, SessionRecord(state=[i] * 10))
        await store.remove(sid)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - baseline
    tracemalloc.stop()
    assert grown < 256 * 1024, f"store kept {grown} bytes after 50k sessions"
