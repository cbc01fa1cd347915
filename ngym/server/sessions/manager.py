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
import logging
import os
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from ngym.server.sessions.cookies import CookieSigner
from ngym.server.sessions.store import SessionLimitReached, SessionRecord, SessionStore

log = logging.getLogger("ngym.sessions")

SESSION_ID_KEY = "session_id"
SCOPE_KEY = "ngym.session"

CloseHook = Callable[[str, Any], Awaitable[None]]


class RequestSession:
    """The session a request belongs to. ``record`` is None until the session is seeded or loaded."""

    __slots__ = ("id", "record", "close_requested", "is_new")

    def __init__(self, session_id: str, record: SessionRecord | None, is_new: bool) -> None:
        self.id = session_id
        self.record = record
        self.close_requested = False
        self.is_new = is_new


current_request_session: ContextVar[RequestSession | None] = ContextVar("ngym_request_session", default=None)


def new_session_id() -> str:
    """A random 128-bit id (hex), like a uuid4 but a few microseconds cheaper: it runs per request."""
    return os.urandom(16).hex()


#: The first character of an id handed to a request that carried no session (``unseeded_session_id``). A seed never
#: keeps such an id (it makes a ``new_session_id``), so a cookie with one names a session nothing was ever seeded
#: under: ported NeMo Gym code may keep state under it lazily, and it is never reported lost
#: (``ngym.server.sessions.lost``). Still letters and digits: the cookie needs no quoting.
UNSEEDED_MARK = "u"


def unseeded_session_id() -> str:
    """The id of a request without a session: ``u`` + 128 random bits in hex (33 characters)."""
    return UNSEEDED_MARK + os.urandom(16).hex()


def is_unseeded_id(session_id: str) -> bool:
    """Whether ``session_id`` was made by ``unseeded_session_id`` (never seeded, so never lost)."""
    return len(session_id) == 33 and session_id[0] == UNSEEDED_MARK


class SessionManager:
    """Owns a store, a cookie signer and the environment's close hook."""

    def __init__(self, store: SessionStore, signer: CookieSigner, on_closed: CloseHook | None) -> None:
        self.store = store
        self.signer = signer
        self._on_closed = on_closed
        self._sweeper: asyncio.Task[None] | None = None
        self._seeding: set[str] = set()

    async def bind(self, cookie_header: bytes | None, load: bool) -> RequestSession:
        """The request's session: the cookie's verified id (its record loaded when ``load``) or a fresh id."""
        session_id = self.signer.session_id_from_header(cookie_header) if cookie_header else None
        if session_id is None:
            return RequestSession(unseeded_session_id(), None, is_new=True)
        record = await self.store.load(session_id) if load else None
        return RequestSession(session_id, record, is_new=False)

    async def persist(self, session: RequestSession) -> None:
        """Write back a record a request may have changed (only stores that serialise need it)."""
        if session.record is not None and not self.store.shares_objects and not session.close_requested:
            await self.store.save(session.id, session.record)

    async def ensure_capacity(self) -> None:
        """Raise ``SessionLimitReached`` when a new session would exceed the bound (after sweeping)."""
        if await self.store.count() >= self.store.max_sessions:
            await self.sweep()
            if await self.store.count() >= self.store.max_sessions:
                raise SessionLimitReached(f"{self.store.max_sessions} sessions are live")

    async def admit(self, session_id: str, record: SessionRecord) -> None:
        """Store a freshly seeded session. When the store refuses it (``SessionLimitReached``: concurrent seeds
        all passed ``ensure_capacity``; a store error; a cancelled request), the close hook runs on the state the
        seed made, so whatever it allocated (a worker process, a slot) is freed instead of leaking for good."""
        try:
            await self.store.create(session_id, record)
        except BaseException:
            await asyncio.shield(self._run_hook_logged(session_id, record))
            raise

    async def close(self, session_id: str) -> bool:
        """Remove a session and run the close hook; False when it was not live. Hook errors propagate."""
        record = await self.store.remove(session_id)
        if record is None:
            return False
        if self._on_closed is not None:
            await self._on_closed(session_id, record.state)
        return True

    async def sweep(self) -> int:
        """Close every session idle for longer than the TTL; returns how many."""
        expired = await self.store.pop_expired()
        for session_id, record in expired:
            await self._run_hook_logged(session_id, record)
        if expired:
            log.info("closed %d idle session(s) after %.0fs", len(expired), self.store.ttl_seconds)
        return len(expired)

    async def _run_hook_logged(self, session_id: str, record: SessionRecord) -> None:
        try:
            if self._on_closed is not None:
                await self._on_closed(session_id, record.state)
        except Exception:
            log.exception("closing session %s failed", session_id)

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
            await self._run_hook_logged(session_id, record)
        await self.store.aclose()

    @contextlib.contextmanager
    def seeding(self, session_id: str):  # type: ignore[no-untyped-def]
        """Guard against two concurrent seeds of one caller-chosen id in this process."""
        if session_id in self._seeding:
            raise SessionConflict(f"resources session {session_id!r} is being seeded by another request")
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


__all__ = [
    "SESSION_ID_KEY",
    "RequestSession",
    "SessionConflict",
    "SessionLimitReached",
    "SessionManager",
    "current_request_session",
    "is_unseeded_id",
    "new_session_id",
    "unseeded_session_id",
]
