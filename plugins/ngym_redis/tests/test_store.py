"""RedisSessionStore against a real redis-server: lifecycle, bound, tombstones, expiry claimed once, errors."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import ClassVar

import pytest
import redis.asyncio as redis
from ngym_redis.plugin import ngym_session_store
from ngym_redis.store import RedisSessionStore, StateCodec, redacted
from ngym_redis.testing import RedisServer
from pydantic import BaseModel

from ngym import BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer
from ngym.errors import ConfigError, SessionStoreError
from ngym.server.pipeline.app import ServeSpec, build_server
from ngym.server.sessions.store import SessionLimitReached, SessionRecord


class Board(BaseModel):
    cells: list[int] = []
    owner: str = ""


def make_store(url: str, *, ttl: float = 60, bound: int = 100, env: str = "t") -> RedisSessionStore:
    return RedisSessionStore(url, env=env, codec=StateCodec(Board, env), ttl_seconds=ttl, max_sessions=bound)


async def test_create_load_save_remove_round_trip_the_state(redis_url: str) -> None:
    store = make_store(redis_url)
    await store.create("a", SessionRecord(state=Board(cells=[1]), meta={"episode_id": {"x": 1}}))
    loaded = await store.load("a")
    assert loaded is not None and loaded.state == Board(cells=[1]) and loaded.meta == {"episode_id": {"x": 1}}
    loaded.state.cells.append(2)
    await store.save("a", loaded)
    again = await store.load("a")
    assert again is not None and again.state.cells == [1, 2]
    assert await store.count() == 1
    removed = await store.remove("a")
    assert removed is not None and removed.state.cells == [1, 2]
    assert await store.remove("a") is None and await store.load("a") is None and await store.count() == 0
    await store.aclose()


async def test_more_concurrent_commands_than_the_pool_holds_wait_for_a_connection(redis_url: str) -> None:
    """1,000 rollouts at once on one server: commands beyond the pool's connections queue, none fails (redis-py's
    default pool failed the 101st concurrent command with "Too many connections")."""
    store = make_store(redis_url, bound=2000)
    ids = [f"c{i}" for i in range(600)]
    await asyncio.gather(*(store.create(i, SessionRecord(state=Board(owner=i))) for i in ids))
    loaded = await asyncio.gather(*(store.load(i) for i in ids))
    assert [r.state.owner for r in loaded if r is not None] == ids
    assert await store.count() == len(ids)
    await store.aclose()


async def test_two_store_instances_see_each_others_sessions(redis_url: str) -> None:
    one, two = make_store(redis_url), make_store(redis_url)
    await one.create("s", SessionRecord(state=Board(owner="one")))
    record = await two.load("s")
    assert record is not None and record.state.owner == "one"
    record.state.owner = "two"
    await two.save("s", record)
    assert (await one.load("s")).state.owner == "two"  # type: ignore[union-attr]
    other_env = make_store(redis_url, env="other")
    assert await other_env.load("s") is None  # environments are kept apart by their key prefix


async def test_save_never_resurrects_a_closed_session(redis_url: str) -> None:
    store = make_store(redis_url)
    await store.create("s", SessionRecord(state=Board()))
    record = await store.load("s")
    assert record is not None
    await store.remove("s")  # closed by another replica meanwhile
    record.state.owner = "late"
    await store.save("s", record)
    assert await store.load("s") is None and await store.count() == 0


async def test_bound_is_shared_and_enforced_atomically(redis_url: str) -> None:
    stores = [make_store(redis_url, bound=5) for _ in range(3)]
    results = await asyncio.gather(
        *(stores[i % 3].create(f"s{i}", SessionRecord()) for i in range(12)), return_exceptions=True
    )
    assert sum(r is None for r in results) == 5
    assert all(isinstance(r, SessionLimitReached) for r in results if r is not None)
    assert await stores[0].count() == 5
    live = next(f"s{i}" for i, r in enumerate(results) if r is None)
    await stores[0].create(live, SessionRecord())  # re-creating a live id is not a new session


async def test_tombstones_expire_with_the_ttl(redis_url: str) -> None:
    store = make_store(redis_url, ttl=0.3)
    await store.mark_closed("typed", {"episode_id": {"a": 1}})
    assert await store.closed_meta("typed") == {"episode_id": {"a": 1}}
    assert await store.closed_meta("other") is None
    await asyncio.sleep(0.45)
    assert await store.closed_meta("typed") is None


async def test_tombstones_are_bounded_in_count_oldest_first(redis_url: str, redis_server: RedisServer) -> None:
    store = RedisSessionStore(
        redis_url, env="bounded", codec=StateCodec(Board, "bounded"), ttl_seconds=60, max_sessions=10, max_closed=3
    )
    for i in range(10):
        await store.mark_closed(f"id-{i}", {"episode": str(i)})
    assert [await store.closed_meta(f"id-{i}") for i in range(10)] == [None] * 7 + [
        {"episode": str(i)} for i in (7, 8, 9)
    ]
    client = redis.Redis.from_url(redis_url)
    try:
        assert len(await client.keys("ngym:{bounded}:closed:*")) == 3
        assert await client.zcard("ngym:{bounded}:closed") == 3
    finally:
        await client.aclose()


async def test_record_keys_carry_a_redis_ttl_refreshed_on_load(redis_url: str, redis_server: RedisServer) -> None:
    store = make_store(redis_url, ttl=10)
    await store.create("s", SessionRecord(state=Board()))
    with redis_server.client() as client:
        key = "ngym:{t}:s:s"
        assert 0 < client.pttl(key) <= store.key_ttl_ms
        client.pexpire(key, 1000)
        await store.load("s")
        assert client.pttl(key) > 1000


async def test_expiry_is_claimed_by_exactly_one_of_many_sweepers(redis_url: str) -> None:
    # A TTL of 1 s leaves a wide margin between touching "fresh" and the sweep on a loaded CI machine.
    stores = [make_store(redis_url, ttl=1.0) for _ in range(4)]
    for i in range(30):
        await stores[0].create(f"s{i}", SessionRecord(state=Board(cells=[i])))
    await stores[0].create("fresh", SessionRecord())
    await asyncio.sleep(1.2)
    await stores[1].load("fresh")  # touched: not idle
    swept = await asyncio.gather(*(s.pop_expired() for s in stores))
    claimed = [session_id for batch in swept for session_id, _ in batch]
    assert sorted(claimed) == sorted(f"s{i}" for i in range(30))  # each exactly once, across all sweepers
    states = {sid: rec.state.cells for batch in swept for sid, rec in batch}
    assert states["s7"] == [7]
    assert await stores[0].count() == 1 and await stores[0].load("fresh") is not None


async def test_a_record_lost_to_the_redis_backstop_is_dropped_with_a_warning(
    redis_url: str, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(redis_url, ttl=0.1)
    await store.create("gone", SessionRecord())
    with redis_server.client() as client:
        client.delete("ngym:{t}:s:gone")
    await asyncio.sleep(0.15)
    with caplog.at_level(logging.WARNING, logger="ngym.redis"):
        assert await store.pop_expired() == []
    assert "expired in Redis before a sweep" in caplog.text and await store.count() == 0


async def test_unchanged_records_are_not_written_back(redis_url: str, redis_server: RedisServer) -> None:
    store = make_store(redis_url)
    await store.create("s", SessionRecord(state=Board(cells=[3])))
    with redis_server.client() as client:
        client.config_resetstat()
        record = await store.load("s")
        assert record is not None
        await store.save("s", record)  # read-only request: nothing to write
        stats = client.info("commandstats")
    assert "cmdstat_evalsha" in stats and stats["cmdstat_evalsha"]["calls"] == 1


async def test_a_down_redis_is_a_session_store_error_and_recovery_follows(own_redis: RedisServer) -> None:
    server = own_redis
    store = make_store(server.url)
    try:
        await store.create("s", SessionRecord())
        server.stop()
        with pytest.raises(SessionStoreError, match=r"Redis at redis://127\.0\.0\.1:\d+/0 failed to load a session"):
            await store.load("s")
        server.restart()  # empty (no persistence): the scripts must be reloaded transparently
        assert await store.load("s") is None
        await store.create("t", SessionRecord(state=Board(owner="back")))
        assert (await store.load("t")).state.owner == "back"  # type: ignore[union-attr]
    finally:
        await store.aclose()
        server.stop()


async def test_a_task_cancelled_during_a_redis_call_is_cancelled(redis_url: str) -> None:
    # redis-py's asyncio.wait_for swallowed about every other cancellation that landed mid-command (Python
    # < 3.12): the session sweeper then never stopped and an app's shutdown hung.
    store = make_store(redis_url)

    async def busy() -> None:
        while True:
            await store.count()

    for attempt in range(40):
        task = asyncio.create_task(busy())
        await asyncio.sleep(random.random() * 0.005)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2)
        assert done and task.cancelled(), f"attempt {attempt}: the cancellation was swallowed"
    await store.aclose()


def test_state_of_the_wrong_type_is_a_clear_type_error() -> None:
    codec = StateCodec(Board, "env")
    with pytest.raises(TypeError, match="session_state_model = Board"):
        codec.dumps({"cells": []})
    assert codec.loads(None) is None and codec.dumps(None) == b"null"


def test_passwords_are_redacted_in_messages() -> None:
    assert redacted("redis://user:hunter2@host:6380/1") == "redis://user:***@host:6380/1"
    assert redacted("redis://:hunter2@host/0") == "redis://:***@host/0"
    assert redacted("redis://user:hunter2@host:99999/0") == "redis://user:***@host:99999/0"  # malformed port
    assert redacted("redis://host:6379/0") == "redis://host:6379/0"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://127.0.0.1:notaport/0", "Port could not be cast"),
        ("redis://user:hunter2@127.0.0.1:99999/0", "Port out of range"),
        ("redis://127.0.0.1:6379/abc", "the path must be a database number"),
        ("redis://127.0.0.1:6379/0?socket_timeout=x", "socket_timeout"),
    ],
)
def test_a_malformed_url_is_a_config_error_naming_it_without_the_password(
    url: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NGYM_SESSION_SECRET", "s")
    with pytest.raises(ConfigError, match=r"^invalid Redis URL redis://") as raised:
        ngym_session_store(url=url, server=_server(Shareable, "ok_env"))
    assert says in str(raised.value) and "hunter2" not in str(raised.value)


class _Cfg(BaseResourcesServerConfig):
    pass


class Stateless(SimpleResourcesServer):
    config: _Cfg
    domain = Domain.OTHER

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


class Live(Stateless):
    session_state_model = Board
    session_affinity_required: ClassVar[bool] = True


class Shareable(Stateless):
    session_state_model = Board


def _server(cls: type, name: str):  # type: ignore[no-untyped-def]
    return build_server(ServeSpec(target=f"{cls.__module__}:{cls.__qualname__}", name=name), cls=cls)


def test_hook_refuses_envs_that_need_affinity_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"^live_env: Live keeps live .*session affinity is required"):
        ngym_session_store(url="redis://127.0.0.1:1/0", server=_server(Live, "live_env"))
    with pytest.raises(ConfigError, match=r"^plain_env: Stateless declares no session_state_model.*affinity"):
        ngym_session_store(url="redis://127.0.0.1:1/0", server=_server(Stateless, "plain_env"))


def test_hook_handles_redis_schemes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NGYM_SESSION_SECRET", "s")
    server = _server(Shareable, "ok_env")
    assert ngym_session_store(url="memcached://x", server=server) is None
    store = ngym_session_store(url="rediss://127.0.0.1:1/0", server=server)
    assert isinstance(store, RedisSessionStore) and store.env == "ok_env"
    assert store.shared_between_processes and not store.shares_objects
