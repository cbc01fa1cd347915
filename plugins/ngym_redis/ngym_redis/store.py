"""``RedisSessionStore``: session records in Redis, shared by every worker and replica that points at it.

Keys (one hash tag per environment, so all of them land in one Redis Cluster slot)::

    ngym:{<env>}:s:<id>         the record: {"meta": ..., "state": ...} (JSON; state as the env's pydantic model)
    ngym:{<env>}:seen           sorted set: id -> last-seen time (ms, Redis server clock); its size is the bound
    ngym:{<env>}:closed:<id>    tombstone of a closed typed-flow id (JSON meta), expires with the TTL
    ngym:{<env>}:closed         sorted set: closed id -> when it was closed; at most max_closed ids (the
                                oldest tombstones are deleted first), so closes without seeds are bounded

Every operation is one round trip (a Lua script, or one pipeline for the sweep's claims) and every time
comes from Redis' own clock (``TIME``), so replicas with skewed clocks agree on who is idle.

Idle expiry and the close hook: ``pop_expired`` (the manager's sweeper, in every replica) lists the ids idle
longer than the TTL, then claims each with a script that removes it from ``seen`` only if it is still idle;
only the caller whose script removed it gets the record, so exactly one replica runs ``on_session_closed``.
The record key also has a Redis TTL (refreshed on every load and save) of twice the session TTL plus a
minute: a backstop so nothing outlives a deployment whose replicas all stopped sweeping.

Shutdown does not close sessions (``drain`` returns nothing): they belong to the deployment, not to one
process, and survive a worker or replica restart; they end by verify, ``/close_session`` or idle expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from pydantic import BaseModel
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT

from ngym import ConfigError
from ngym.plugin_api import (
    SessionLimitReached,
    SessionRecord,
    SessionStore,
    SessionStoreError,
    secret_configured,
)
from ngym.plugin_api import redact_url as redacted

if TYPE_CHECKING:
    from ngym import SimpleResourcesServer

log = logging.getLogger("ngym.redis")
T = TypeVar("T")

_NOW_MS = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

# KEYS: record, seen. ARGV: id, payload, max_sessions, key ttl (ms). 1 = created, 0 = the bound is reached.
CREATE = (
    _NOW_MS
    + """
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[4])
redis.call('ZADD', KEYS[2], now, ARGV[1])
return 1
"""
)

# KEYS: tombstone, closed index. ARGV: id, meta, ttl (ms), max closed, tombstone key prefix. Keeps at most
# max closed tombstones, oldest deleted first (their keys share the index's hash tag, so one slot).
CLOSE = (
    _NOW_MS
    + """
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[3]))
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, over - 1)) do
    redis.call('DEL', ARGV[5] .. id)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""
)

# KEYS: record, seen. ARGV: id, key ttl (ms). The payload (TTL and last-seen refreshed), or nil.
LOAD = (
    _NOW_MS
    + """
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], 'XX', now, ARGV[1])
return v
"""
)

# KEYS: record, seen. ARGV: id, payload, key ttl (ms). Writes only a live record (never resurrects a closed one).
SAVE = (
    _NOW_MS
    + """
if redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3], 'XX') then
  redis.call('ZADD', KEYS[2], 'XX', now, ARGV[1])
  return 1
end
return 0
"""
)

# KEYS: record, seen. ARGV: id. The payload of the removed record, or nil when it was not live.
REMOVE = """
local v = redis.call('GET', KEYS[1])
if v then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[2], ARGV[1])
return v
"""

# KEYS: seen. ARGV: ttl (ms), limit. Ids idle for longer than the TTL, oldest first.
EXPIRED = (
    _NOW_MS
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
"""
)

# KEYS: record, seen. ARGV: id, ttl (ms). {1, payload} for the one caller that claims a still-idle session;
# {1} when it was idle but its record is already gone (Redis' backstop TTL); {0} when not idle (or taken).
CLAIM = (
    _NOW_MS
    + """
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) > now - tonumber(ARGV[2]) then return {0} end
redis.call('ZREM', KEYS[2], ARGV[1])
local v = redis.call('GET', KEYS[1])
if not v then return {1} end
redis.call('DEL', KEYS[1])
return {1, v}
"""
)

# KEYS: seen. Live sessions (a script like every other data operation, so INFO commandstats' EVALSHA calls
# are exactly the store's round trips).
COUNT = "return redis.call('ZCARD', KEYS[1])"

#: How many idle sessions one sweep claims at most (the next sweep takes the rest).
SWEEP_BATCH = 500


class StateCodec:
    """Session state <-> JSON through the environment's ``session_state_model`` (None stays None)."""

    def __init__(self, model: type[BaseModel], env: str) -> None:
        self.model = model
        self.env = env

    def dumps(self, state: Any) -> bytes:
        if state is None:
            return b"null"
        if not isinstance(state, self.model):
            raise TypeError(
                f"{self.env}: session state is a {type(state).__name__}, but the environment declares "
                f"session_state_model = {self.model.__name__}; set_session_state() must be given that model"
            )
        return state.model_dump_json().encode()

    def loads(self, data: Any) -> Any:
        return None if data is None else self.model.model_validate(data)


def check_url(url: str) -> None:
    """A ConfigError naming the (redacted) URL when redis-py would reject it or silently ignore its database."""
    try:
        aioredis.ConnectionPool.from_url(url)
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redacted(url)}: {exc}") from None
    database = urlsplit(url).path.strip("/")
    if database and not database.isdigit():
        raise ConfigError(f"invalid Redis URL {redacted(url)}: the path must be a database number, e.g. /0")


#: connections one store (one serving process) keeps to Redis at most; more concurrent commands queue for one
POOL_CONNECTIONS = 64
#: how long a command waits for a free connection before it fails (a SessionStoreError, answered 503)
POOL_WAIT_SECONDS = 10.0


class RedisSessionStore(SessionStore):
    """A ``SessionStore`` in Redis (see the module docstring for keys, expiry and the close hook)."""

    shares_objects: ClassVar[bool] = False
    shared_between_processes: ClassVar[bool] = True

    def __init__(
        self,
        url: str,
        *,
        env: str,
        codec: StateCodec,
        ttl_seconds: float,
        max_sessions: int,
        max_closed: int | None = None,
        client: aioredis.Redis | None = None,
    ) -> None:
        super().__init__(ttl_seconds=ttl_seconds, max_sessions=max_sessions, max_closed=max_closed)
        self.url = url
        self.env = env
        self.codec = codec
        self._prefix = f"ngym:{{{env}}}:"
        self._seen = self._prefix + "seen"
        self.ttl_ms = max(1, int(ttl_seconds * 1000))
        #: Redis' own expiry of a record: a backstop well after the sweep's.
        self.key_ttl_ms = 2 * self.ttl_ms + 60_000
        # A blocking pool: past POOL_CONNECTIONS commands at once a request waits for a connection (up to
        # POOL_WAIT_SECONDS) instead of failing. redis-py's default pool fails the 101st concurrent command with
        # "Too many connections": found at 1,000 concurrent rollouts on one environment (3,895 failed requests).
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=POOL_CONNECTIONS,
            timeout=POOL_WAIT_SECONDS,
            socket_connect_timeout=2,
            socket_timeout=5,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
        )
        self._redis = client or aioredis.Redis(connection_pool=pool)
        register = self._redis.register_script
        self._create, self._load, self._save = register(CREATE), register(LOAD), register(SAVE)
        self._remove, self._expired, self._claim = register(REMOVE), register(EXPIRED), register(CLAIM)
        self._count, self._close = register(COUNT), register(CLOSE)
        self._closed_index = self._prefix + "closed"

    @classmethod
    def for_server(cls, url: str, server: SimpleResourcesServer) -> RedisSessionStore:
        """The store of ``server``, or a ConfigError when its state cannot be shared (affinity required)."""
        check_url(url)
        server_cls = type(server)
        env = server.config.name or server_cls.__name__
        affinity = (
            "session affinity is required: keep the memory store (unset NGYM_SESSION_STORE / session_store), with "
            "which `ngym run NAME --workers N` keeps each rollout on its worker behind HAProxy, and route each "
            "session to one replica across machines (see docs/scale-out.md)"
        )
        if server_cls.session_affinity_required:
            raise ConfigError(
                f"{env}: {server_cls.__name__} keeps live per-session state that cannot be serialised "
                f"(session_affinity_required = True), so it cannot use the shared session store {redacted(url)}; "
                + affinity
            )
        model = server_cls.session_state_model
        if model is None:
            raise ConfigError(
                f"{env}: {server_cls.__name__} declares no session_state_model, so its session state cannot be "
                f"stored in {redacted(url)}; declare `session_state_model = <pydantic model>` on the class, or "
                + affinity
            )
        if not _secret_configured(server):
            log.warning(
                "%s: no session secret configured (NGYM_SESSION_SECRET or session_secret): this process made a "
                "random one, so replicas sharing %s reject each other's cookies and a restart loses every "
                "rollout's cookie; give all of them the same NGYM_SESSION_SECRET",
                env,
                redacted(url),
            )
        return cls(
            url,
            env=env,
            codec=StateCodec(model, env),
            ttl_seconds=server.config.session_ttl_seconds,
            max_sessions=server.config.max_sessions,
            max_closed=server.config.max_closed_sessions,
        )

    # ---- keys and payloads ---------------------------------------------------------------------

    def _key(self, session_id: str) -> str:
        return f"{self._prefix}s:{session_id}"

    def _tombstone(self, session_id: str) -> str:
        return f"{self._prefix}closed:{session_id}"

    def _encode(self, record: SessionRecord) -> bytes:
        meta = json.dumps(record.meta, separators=(",", ":")).encode()
        return b'{"meta":%s,"state":%s}' % (meta, self.codec.dumps(record.state))

    def _decode(self, payload: bytes) -> SessionRecord:
        data = json.loads(payload)
        return SessionRecord(state=self.codec.loads(data["state"]), meta=data["meta"], stored=payload)

    async def _call(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        try:
            result = await operation()
        except RedisError as exc:
            _raise_swallowed_cancel()
            raise SessionStoreError(f"Redis at {redacted(self.url)} failed to {what}: {exc}") from exc
        _raise_swallowed_cancel()
        return result

    # ---- the SessionStore interface ------------------------------------------------------------

    async def create(self, session_id: str, record: SessionRecord) -> None:
        payload = self._encode(record)
        keys = [self._key(session_id), self._seen]
        args: list[EncodableT] = [session_id, payload, self.max_sessions, self.key_ttl_ms]
        if not await self._call("create a session", lambda: self._create(keys=keys, args=args)):
            raise SessionLimitReached(f"{self.max_sessions} sessions are live")
        record.stored = payload

    async def load(self, session_id: str) -> SessionRecord | None:
        keys = [self._key(session_id), self._seen]
        args: list[EncodableT] = [session_id, self.key_ttl_ms]
        payload = await self._call("load a session", lambda: self._load(keys=keys, args=args))
        return None if payload is None else self._decode(payload)

    async def save(self, session_id: str, record: SessionRecord) -> None:
        payload = self._encode(record)
        if payload == record.stored:  # unchanged: load already refreshed its TTL
            return
        keys = [self._key(session_id), self._seen]
        args: list[EncodableT] = [session_id, payload, self.key_ttl_ms]
        if await self._call("save a session", lambda: self._save(keys=keys, args=args)):
            record.stored = payload

    async def remove(self, session_id: str) -> SessionRecord | None:
        keys = [self._key(session_id), self._seen]
        payload = await self._call("close a session", lambda: self._remove(keys=keys, args=[session_id]))
        return None if payload is None else self._decode(payload)

    async def mark_closed(self, session_id: str, meta: dict[str, Any]) -> None:
        value = json.dumps(meta, separators=(",", ":"))
        keys = [self._tombstone(session_id), self._closed_index]
        args: list[EncodableT] = [session_id, value, self.ttl_ms, self.max_closed, self._tombstone("")]
        await self._call("mark a session closed", lambda: self._close(keys=keys, args=args))

    async def closed_meta(self, session_id: str) -> dict[str, Any] | None:
        value = await self._call("read a tombstone", lambda: self._redis.get(self._tombstone(session_id)))
        return None if value is None else json.loads(value)

    async def pop_expired(self) -> list[tuple[str, SessionRecord]]:
        args = [self.ttl_ms, SWEEP_BATCH]
        ids = await self._call("list idle sessions", lambda: self._expired(keys=[self._seen], args=args))
        if not ids:
            return []

        async def claim_all() -> list[Any]:
            async with self._redis.pipeline(transaction=False) as pipe:
                for raw_id in ids:
                    session_id = raw_id.decode()
                    await self._claim(
                        keys=[self._key(session_id), self._seen], args=[session_id, self.ttl_ms], client=pipe
                    )
                return await pipe.execute()

        expired: list[tuple[str, SessionRecord]] = []
        for raw_id, claimed in zip(ids, await self._call("expire idle sessions", claim_all), strict=True):
            if len(claimed) == 2:
                expired.append((raw_id.decode(), self._decode(claimed[1])))
            elif claimed[0]:
                log.warning(
                    "%s: session %s expired in Redis before a sweep; its close hook cannot run",
                    self.env,
                    raw_id.decode(),
                )
        return expired

    async def count(self) -> int:
        return int(await self._call("count sessions", lambda: self._count(keys=[self._seen])))

    async def drain(self) -> list[tuple[str, SessionRecord]]:
        """Nothing: shared sessions outlive this process (another worker or replica carries them on)."""
        return []

    async def aclose(self) -> None:
        with contextlib.suppress(RedisError):
            await self._redis.aclose()

    async def ping(self) -> None:
        """Raise ``SessionStoreError`` unless Redis answers."""
        await self._call("answer PING", self._redis.ping)


def _raise_swallowed_cancel() -> None:
    """Re-raise a cancellation of this task that a Redis call swallowed.

    redis-py sends every command through ``asyncio.wait_for`` (when a socket timeout is set), and on
    Python < 3.12 ``wait_for`` returns the result instead of raising when the task is cancelled just as the
    command completes (CPython gh-86296). The task then runs on as if never cancelled: the session sweeper
    looped forever and an app's shutdown hung, about every other time when cancelled mid-call. The request
    is still counted by ``Task.cancelling()``, so it is raised here.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _secret_configured(server: SimpleResourcesServer) -> bool:
    return bool(server.config.session_secret) or secret_configured()
