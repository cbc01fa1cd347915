"""The session lifecycle of one server: binds each request to its session and runs the close hook once.

Every HTTP request gets a ``RequestSession`` (in the ASGI scope and a context variable): the verified id
from its cookie (or a fresh, unsaved one) and, for requests that may touch state, the loaded record. The
environment reads and replaces state through it; the manager saves it back (for serialising stores),
closes sessions (explicitly, after verify, on idle TTL, at shutdown) and calls the environment's close
hook exactly once per session, because only the caller that removed a record from the store gets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from ngym.errors import SessionStoreError
from ngym.server.pipeline.traffic import Traffic
from ngym.server.sessions.cookies import CookieSigner, DuplicateSessionCookie
from ngym.server.sessions.lazy_share import LazyShare
from ngym.server.sessions.routing import RouteSlot
from ngym.server.sessions.store import SessionLimitReached, SessionRecord, SessionStore

log = logging.getLogger("ngym.sessions")

SESSION_ID_KEY = "session_id"
SCOPE_KEY = "ngym.session"

CloseHook = Callable[[str, Any], Awaitable[None]]
T = TypeVar("T")


class SessionView(dict[str, Any]):
    """``request.session`` for ported NeMo Gym code: ``{"session_id": id}``, noting whether that code read it (a
    request without a session whose code keys state by its id starts a session NeMo Gym's way, lazily)."""

    __slots__ = ("read",)

    def __init__(self, session_id: str) -> None:
        super().__init__({SESSION_ID_KEY: session_id})
        self.read = False

    def __getitem__(self, key: str) -> Any:
        self.read = True
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read = True
        return super().get(key, default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self.read = True
        return super().setdefault(key, default)

    def pop(self, key: str, *default: Any) -> Any:
        self.read = True
        return super().pop(key, *default)


class RequestSession:
    """The session a request belongs to. ``record`` is None until the session is seeded or loaded.

    ``view`` is the dict ported NeMo Gym code sees as ``request.session`` (``{"session_id": id}``); the
    middleware reads it back after the response to learn whether that code switched or ended the session.
    ``sets_cookie``: the request seeded a session whose cookie the answer hands out (``/seed_session``, ported code
    switching sessions, or a request without a session whose ported code kept state under its id, NeMo Gym's lazy
    seed). Apart from that, only a successful answer of a live session held here repeats the cookie it came with.
    """

    __slots__ = ("id", "record", "close_requested", "is_new", "view", "sets_cookie")

    def __init__(self, session_id: str, record: SessionRecord | None, is_new: bool) -> None:
        self.id = session_id
        self.record = record
        self.close_requested = False
        self.is_new = is_new
        self.sets_cookie = False
        self.view = SessionView(session_id)

    def close_after_response(self) -> None:
        """Ask for this session to be closed once the response is sent (``NgymMiddleware`` closes it: the close
        hook once). The one place that decides it: only a session held here (seeded or loaded) is closed; a
        request without one has nothing to free. Called after a verify that answered
        (``close_session_after_verify``), a ``/close_session`` an override answered, and ported code that popped
        ``request.session["session_id"]``."""
        if self.record is not None:
            self.close_requested = True


current_request_session: ContextVar[RequestSession | None] = ContextVar("ngym_request_session", default=None)


#: ``SessionRecord.meta`` key of a session NeMo Gym's lazy seed started (``SessionManager.admit_lazy``): its
#: Gymnasium episode's last step ends it (``ngym.server.pipeline.lazy_episodes``).
LAZY_META = "lazy"


def new_session_id() -> str:
    """A random 128-bit id (hex), like a uuid4 but a few microseconds cheaper: it runs per request."""
    return os.urandom(16).hex()


#: The first character of an id given to a request that carried no session (``unseeded_session_id``). Ported NeMo
#: Gym code may keep state under it (NeMo Gym's lazy session): then it becomes a live session like a seeded one
#: (``SessionManager.admit_lazy``), else it is never handed out. Still letters and digits: no quoting.
UNSEEDED_MARK = "u"


def unseeded_session_id(slot: RouteSlot | None = None) -> str:
    """The id of a request without a session: ``u`` + 128 random bits in hex (33 characters), routed to ``slot``."""
    return (slot or RouteSlot()).new_id(UNSEEDED_MARK)


def is_unseeded_id(session_id: str) -> bool:
    """Whether ``session_id`` was made by ``unseeded_session_id`` (never seeded, so never lost)."""
    return len(session_id) == 33 and session_id[0] == UNSEEDED_MARK


class SessionManager:
    """Owns a store, a cookie signer and the environment's close hook."""

    def __init__(
        self,
        store: SessionStore,
        signer: CookieSigner,
        on_closed: CloseHook | None,
        slot: RouteSlot | None = None,
        on_unseeded_done: Callable[[str], Awaitable[None]] | None = None,
        lazy: LazyShare | None = None,
    ) -> None:
        self.store = store
        self.signer = signer
        #: this process's place in its routing set (``NGYM_ROUTE_SLOT``): the ids it makes route back to it
        self.slot = slot if slot is not None else RouteSlot.from_env()
        # Sessions held in this process's memory are held by one process of the set only: a request naming another
        # slot's id is never served here. A store the processes share (Redis) serves any id on any of them.
        self._slot_holds_only_its_own = self.slot.count > 1 and not store.shared_between_processes
        #: called with the id of a request that carried no session once it is answered: that id was never handed
        #: out, so whatever the environment keyed by it can be freed (``forget_unseeded_session``)
        self.on_unseeded_done = on_unseeded_done
        #: responses counted for ``/health`` (rollouts/s and errors in ``ngym status``)
        self.traffic = Traffic.for_this_process()  # shared by uvicorn's workers of one port (traffic.py)
        self._on_closed = on_closed
        self._sweeper: asyncio.Task[None] | None = None
        #: called after every sweep: what a protocol front keeps per session beside the store (its episodes' rows
        #: and trajectories) is let go with the sessions the sweep expired (``after_sweep``)
        self._after_sweep: list[Callable[[], Awaitable[None]]] = []
        self._seeding: set[str] = set()
        #: the lazily started sessions this process holds, bounded apart from seeded ones (``lazy_share``)
        self.lazy = lazy if lazy is not None else LazyShare(store.max_sessions)
        self.lazy.limit = min(self.lazy.limit, store.max_sessions)

    async def bind(self, cookie_header: bytes | None, load: bool) -> RequestSession:
        """The request's session: the cookie's verified id (its record loaded when ``load``) or a fresh id.

        ``DuplicateSessionCookie`` when the header carries the session cookie more than once. A cookie naming
        another slot's session (the request reached this process because its own one is down, or went around the
        proxy) is bound with no record: it is answered as lost here, never served from whatever this process holds.
        """
        session_id = self.signer.session_id_from_header(cookie_header) if cookie_header else None
        if session_id is None:
            return RequestSession(unseeded_session_id(self.slot), None, is_new=True)
        owned = not self._slot_holds_only_its_own or self.slot.owns(session_id)
        record = await self.store.load(session_id) if load and owned else None
        if record is not None and record.meta.get(LAZY_META):
            self.lazy.touch(session_id)
        return RequestSession(session_id, record, is_new=False)

    def check_owned(self, session_id: str) -> None:
        """Raise ``SessionElsewhere`` when a caller-chosen id routes to another process of the set."""
        if self._slot_holds_only_its_own and not self.slot.owns(session_id):
            raise SessionElsewhere(
                f"resources session {session_id!r} belongs to another worker of this server (this is "
                f"{self.slot.describe()}); that worker is down or restarting, or the request went around the proxy: "
                "retry through the server's address"
            )

    async def persist(self, session: RequestSession) -> None:
        """Write back a record a request may have changed (only stores that serialise need it)."""
        if session.record is not None and not self.store.shares_objects and not session.close_requested:
            await self.store.save(session.id, session.record)

    async def ensure_capacity(self) -> None:
        """Raise ``SessionLimitReached`` when a new seeded session would exceed the bound: after sweeping, and after
        closing the least recently used lazily started session, if any (a seed always has room up to
        ``max_sessions`` whatever cookie-less traffic started: ``ngym.server.sessions.lazy_share``)."""
        if await self.store.count() >= self.store.max_sessions:
            await self.sweep()
            while await self.store.count() >= self.store.max_sessions:
                if not await self.evict_lazy("a seed needs room"):
                    raise SessionLimitReached(f"{self.store.max_sessions} sessions are live")

    async def evict_lazy(self, why: str) -> bool:
        """Close the least recently used lazily started session this process holds (its close hook runs); False
        when it holds none. Logged and counted (``/health``'s ``lazy_sessions.evicted``)."""
        while (session_id := self.lazy.oldest()) is not None:
            record = await self.store.remove(session_id)
            if record is None:  # already gone (closed or expired meanwhile)
                continue
            self.lazy.evicted += 1
            if self.lazy.evicted <= 10 or self.lazy.evicted % 1000 == 0:  # every one counted, a flood's log bounded
                log.warning(
                    "closed lazily started session %s (least recently used of %d; %d closed so far): %s; its next "
                    "request is answered as a lost session",
                    session_id,
                    len(self.lazy) + 1,
                    self.lazy.evicted,
                    why,
                )
            await self._run_hook_logged(session_id, record)
            return True
        return False

    async def admit(self, session_id: str, record: SessionRecord) -> None:
        """Store a freshly seeded session. When the store refuses it (``SessionLimitReached``: concurrent seeds
        all passed ``ensure_capacity``; a store error; a cancelled request), the close hook runs on the state the
        seed made, so whatever it allocated (a worker process, a slot) is freed instead of leaking for good."""
        try:
            try:
                await self.store.create(session_id, record)
            except SessionLimitReached:  # a lazy start took the room since ensure_capacity: it makes room again
                if not await self.evict_lazy("a seed needs room"):
                    raise
                await self.store.create(session_id, record)
        except BaseException:
            await asyncio.shield(self._run_hook_logged(session_id, record))
            raise

    async def admit_lazy(self, session: RequestSession) -> bool:
        """Make the one-off id of a request without a session a live session (NeMo Gym's lazy seed: its code kept
        state under ``request.session["session_id"]``): bounded by ``max_sessions``, expired by the idle TTL and
        closed with the close hook like any other. Held in a share of their own (``lazy_share``): past
        ``max_lazy_sessions``, or when the store is full, the least recently used lazy session is closed first. False
        (nothing admitted) when the store is full of seeded sessions."""
        while self.lazy.full():
            if self.lazy.refuse_when_full or not await self.evict_lazy("a newer one started"):
                return False
        if await self.store.count() >= self.store.max_sessions:
            await self.sweep()
            while await self.store.count() >= self.store.max_sessions:
                if not await self.evict_lazy("a newer one started"):
                    return False
        record = SessionRecord(meta={LAZY_META: True})
        try:
            await self.store.create(session.id, record)
        except SessionLimitReached:
            return False
        self.lazy.add(session.id)
        session.record, session.sets_cookie = record, True
        return True

    async def close(self, session_id: str) -> bool:
        """Remove a session and run the close hook; False when it was not live. Hook errors propagate."""
        record = await self.store.remove(session_id)
        self.lazy.discard(session_id)
        if record is None:
            return False
        if self._on_closed is not None:
            await self._on_closed(session_id, record.state)
        return True

    # ---- the session protocol the standard routes speak (no HTTP here: tests drive it directly) -------------
    #
    # "Is this session known, closed or gone?" is decided in these methods and in ``bind`` only: ``bind`` for a
    # cookie (its record loaded, or None when the store has no such session), ``_refuse_closed`` for a
    # caller-chosen id. A rule about lost or expired sessions belongs here, not in a route.

    def rebind(
        self, session: RequestSession, session_id: str, record: SessionRecord | None, *, is_new: bool | None = None
    ) -> None:
        """Make ``session`` (the request's) be ``session_id`` with ``record``: the cookie set on the response and
        ``request.session["session_id"]`` follow."""
        session.id, session.record = session_id, record
        session.view[SESSION_ID_KEY] = session_id
        session.sets_cookie = True
        if is_new is not None:
            session.is_new = is_new

    async def seed_row(self, session: RequestSession, seed: Callable[[], Awaitable[T]]) -> T:
        """Seed the request's session from a dataset row: ``seed()`` is the environment's ``seed_session``.

        A live cookie's session is closed first (a new seed restarts that rollout) and never reused: the seed
        gets a fresh id, as does a request without a cookie (its ``unseeded_session_id`` says nothing was seeded
        under it; a seeded id, named later on a process that does not hold it, is a lost session:
        ``ngym.server.sessions.lost``). ``SessionLimitReached`` when the store is full (before ``seed`` runs, and
        when the store refuses the record after it: then the close hook frees what ``seed`` made).
        """
        if session.record is not None:
            await self.close(session.id)
        await self.ensure_capacity()
        self.rebind(session, self.slot.new_id(), None, is_new=True)
        record = session.record = SessionRecord()
        try:
            result = await seed()
            await self.admit(session.id, record)
        except BaseException:  # nothing was admitted: nothing for the middleware to write back, no cookie to set
            session.record = None
            session.sets_cookie = False
            raise
        return result

    async def seed_typed(
        self,
        session: RequestSession,
        session_id: str,
        episode: dict[str, Any],
        task: dict[str, Any],
        seed: Callable[[], Awaitable[T]],
    ) -> tuple[T | None, bool]:
        """Seed the caller-chosen ``session_id`` (NeMo Gym 0.7's typed body) and bind the request to it.

        Returns ``(seed's answer, True)``, or ``(None, False)`` when the id is already live for ``episode``
        (an idempotent repeat: ``seed`` does not run again). Raises ``SessionConflict`` (409) when the id was
        closed (no resurrection), is live for another episode, or is being seeded or closed by another request
        of this process; ``SessionLimitReached`` as ``seed_row``.
        """
        self.check_owned(session_id)
        with self.exclusive(session_id):
            await self._refuse_closed(session_id)
            existing = await self.store.load(session_id)
            if existing is not None:
                if existing.meta.get("episode_id") != episode:
                    raise SessionConflict(f"resources session {session_id!r} is seeded for another episode")
                self.rebind(session, session_id, existing)
                return None, False
            await self.ensure_capacity()
            before = (session.id, session.record, session.is_new)
            record = SessionRecord(meta={"episode_id": episode, "task_id": task})
            self.rebind(session, session_id, record, is_new=True)
            try:
                result = await seed()
                await self.admit(session_id, record)
            except BaseException:  # nothing was admitted: the request is back on the session it came with
                self.rebind(session, before[0], before[1], is_new=before[2])
                session.sets_cookie = False
                raise
        return result, True

    async def close_typed(
        self, session_id: str, episode: dict[str, Any], release: Callable[[], Awaitable[T]] | None = None
    ) -> tuple[T | None, bool]:
        """Close the caller-chosen ``session_id`` for ``episode``, once: ``release()`` (the environment's
        ``close_resources_session``) then the close hook. Returns ``(release's answer, True)``, or
        ``(None, False)`` when the id was already closed for that episode (an idempotent repeat).

        A never-seeded id closes too and is remembered, so no later seed creates it. When ``release`` raises,
        nothing is recorded as closed and the caller may retry. ``SessionConflict`` (409) when the id was closed
        for, or is live for, another episode.
        """
        self.check_owned(session_id)
        digest = episode_digest(episode)
        with self.exclusive(session_id):  # a seed of this id in this process meanwhile is refused (409)
            closed = await self.store.closed_meta(session_id)
            if closed is not None:
                if closed.get("episode") != digest:
                    raise SessionConflict(f"resources session {session_id!r} was closed for another episode")
                return None, False
            live = await self.store.load(session_id)
            if live is not None and live.meta.get("episode_id") != episode:
                raise SessionConflict(f"resources session {session_id!r} belongs to another episode")
            result = await release() if release is not None else None
            # Remembered before the record goes, so no seed can find the id neither live nor closed.
            await self.store.mark_closed(session_id, {"episode": digest})
            await self.close(session_id)
        return result, True

    async def close_bound(self, session: RequestSession) -> bool:
        """Close the request's own (cookie) session now; False when it was not live."""
        closed = await self.close(session.id)
        session.record = None
        return closed

    async def _refuse_closed(self, session_id: str) -> None:
        if await self.store.closed_meta(session_id) is not None:
            raise SessionConflict(f"resources session {session_id!r} was closed; it cannot be seeded again")

    async def sweep(self) -> int:
        """Close every session idle for longer than the TTL; returns how many."""
        expired = await self.store.pop_expired()
        for session_id, record in expired:
            self.lazy.discard(session_id)
            await self._run_hook_logged(session_id, record)
        if expired:
            log.info("closed %d idle session(s) after %.0fs", len(expired), self.store.ttl_seconds)
        for listener in self._after_sweep:
            try:
                await listener()
            except Exception:
                log.exception("a front's sweep failed")
        return len(expired)

    def after_sweep(self, listener: Callable[[], Awaitable[None]]) -> None:
        """Run ``listener`` after every sweep (every quarter of the TTL, at most 30 s apart): a protocol front lets
        go of the episodes idle past the TTL, whose sessions the sweep closed, even when no new episode opens."""
        self._after_sweep.append(listener)

    async def _run_hook_logged(self, session_id: str, record: SessionRecord) -> None:
        try:
            if self._on_closed is not None:
                await self._on_closed(session_id, record.state)
        except Exception:
            log.exception("closing session %s failed", session_id)

    async def warn_if_store_is_down(self, timeout: float = 5.0) -> None:
        """At startup: warn when a shared store (Redis) does not answer. The server still starts (a store may come
        back, as after a Redis outage under a running server), but a store that was never started is then said once
        in the server's log, not only as a 503 on every rollout."""
        if self.store.shares_objects:  # in this process: nothing to reach
            return
        try:
            await asyncio.wait_for(self.store.count(), timeout)
        except (SessionStoreError, TimeoutError) as exc:
            reason = str(exc) or f"no answer within {timeout:g} s"
            log.warning("the session store does not answer (%s): every rollout gets HTTP 503 until it does", reason)

    def start_sweeper(self) -> None:
        interval = max(0.05, min(self.store.ttl_seconds / 4, 30.0))

        async def loop() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.sweep()
                except Exception:
                    log.exception("session sweep failed")

        self._sweeper = asyncio.get_running_loop().create_task(loop(), name="ngym-session-sweeper")

    async def shutdown(self) -> None:
        """Stop sweeping and close every session this process holds."""
        if self._sweeper is not None:
            await _stop_task(self._sweeper)
        for session_id, record in await self.store.drain():
            self.lazy.discard(session_id)
            await self._run_hook_logged(session_id, record)
        await self.store.aclose()

    @contextlib.contextmanager
    def exclusive(self, session_id: str) -> Iterator[None]:
        """Guard against two concurrent seeds or closes of one caller-chosen id in this process."""
        if session_id in self._seeding:
            raise SessionConflict(f"resources session {session_id!r} is being seeded or closed by another request")
        self._seeding.add(session_id)
        try:
            yield
        finally:
            self._seeding.discard(session_id)


async def _stop_task(task: asyncio.Task[None], attempts: int = 20, wait_s: float = 0.5) -> None:
    """Cancel ``task`` and wait for it to end, cancelling again if a cancellation was lost.

    A store client that swallows a cancellation (e.g. ``asyncio.wait_for`` on Python 3.11 when the command
    finishes at the same moment, CPython gh-86296) would otherwise keep the sweeper alive and hang shutdown.
    """
    for _ in range(attempts):
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=wait_s)
        if done:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()
            return
    log.warning("the session sweeper did not stop after %d cancellations; shutting down without it", attempts)


class SessionConflict(Exception):
    """A typed seed/close conflicts with the session's state (HTTP 409)."""


class SessionElsewhere(Exception):
    """A typed seed/close names an id that another process of the routing set holds (HTTP 503): never honoured
    here, so no process closes or creates a session it does not route."""


def episode_digest(episode: dict[str, Any]) -> str:
    """A fixed-size stand-in for an episode id, kept with a closed session id: a caller's ``rollout_id`` may be
    of any length, and a close (no seed needed) must not pin it in memory."""
    canonical = json.dumps(episode, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


__all__ = [
    "SESSION_ID_KEY",
    "RequestSession",
    "DuplicateSessionCookie",
    "SessionConflict",
    "SessionElsewhere",
    "SessionLimitReached",
    "SessionManager",
    "current_request_session",
    "is_unseeded_id",
    "new_session_id",
    "unseeded_session_id",
]
