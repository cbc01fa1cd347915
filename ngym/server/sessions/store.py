"""Session stores: where each rollout's state lives, with an explicit lifecycle.

A store keeps one ``SessionRecord`` per session id: ``create`` (at seed), ``load`` (every request that
carries the cookie; refreshes the idle TTL), ``save`` (after a request, for stores that serialise),
``remove`` (close), ``pop_expired`` (idle-TTL sweep) and ``drain`` (shutdown). Closed ids of the typed seed
flow are remembered (``mark_closed``) so a late retry cannot resurrect a finished rollout.

Closed ids cost memory without any session behind them (a close needs no seed), so their memory is bounded:
at most ``max_closed`` ids, each at most the session id length limit plus a fixed-size episode digest, for
at most the session TTL. The trade-off: past ``max_closed`` closes within one TTL, the oldest are forgotten
first, and a seed of such an id would be accepted again.

``MemorySessionStore`` keeps live Python objects in this process. Other stores (e.g. the Redis plugin) come
from the ``ngym_session_store`` hook and must serialise state; they set ``shares_objects = False``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(slots=True)
class SessionRecord:
    """One session: the environment's state object and ngym's own metadata (e.g. the typed seed's episode)."""

    state: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: The store's own bookkeeping (e.g. the serialised form last written, so an unchanged record is not
    #: written back). Environments never touch it.
    stored: Any = field(default=None, repr=False, compare=False)


class SessionLimitReached(Exception):
    """The store holds ``max_sessions`` live sessions already; the server answers 503 with Retry-After."""


class SessionStore(ABC):
    """The interface every session store implements (async, so network stores fit)."""

    #: True when ``load`` returns the live object (no ``save`` needed after a request).
    shares_objects: ClassVar[bool] = True
    #: True when several processes can use the store at once (``ngym run --workers N`` needs it).
    shared_between_processes: ClassVar[bool] = False

    def __init__(self, *, ttl_seconds: float, max_sessions: int, max_closed: int | None = None) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_sessions = max_sessions
        #: How many closed ids are remembered at most (default: as many as live sessions may exist).
        self.max_closed = max_closed if max_closed is not None else max_sessions

    @abstractmethod
    async def create(self, session_id: str, record: SessionRecord) -> None:
        """Add a session; raise ``SessionLimitReached`` when full."""

    @abstractmethod
    async def load(self, session_id: str) -> SessionRecord | None:
        """The session's record (refreshing its idle TTL), or None."""

    async def save(self, session_id: str, record: SessionRecord) -> None:  # noqa: B027 - optional for memory
        """Persist a record changed by a request (a no-op where ``shares_objects``)."""

    @abstractmethod
    async def remove(self, session_id: str) -> SessionRecord | None:
        """Forget a session and return its record (None if it was not there)."""

    @abstractmethod
    async def mark_closed(self, session_id: str, meta: dict[str, Any]) -> None:
        """Remember that a caller-chosen id was closed (bounded, expires with the TTL)."""

    @abstractmethod
    async def closed_meta(self, session_id: str) -> dict[str, Any] | None:
        """The metadata a closed id was closed with, or None if it was not closed."""

    @abstractmethod
    async def pop_expired(self) -> list[tuple[str, SessionRecord]]:
        """Remove and return the sessions idle for longer than the TTL."""

    @abstractmethod
    async def count(self) -> int:
        """How many sessions are live."""

    @abstractmethod
    async def drain(self) -> list[tuple[str, SessionRecord]]:
        """Remove and return every session this process is responsible for (at shutdown)."""

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release connections."""

    def records(self) -> list[SessionRecord] | None:
        """The live records this process holds, for ``/health``'s per-session figures (None: not listable here)."""
        return None


class MemorySessionStore(SessionStore):
    """In-process store: an LRU-ordered dict, so expiry pops from the front in O(expired)."""

    def __init__(
        self, *, ttl_seconds: float, max_sessions: int, max_closed: int | None = None, clock: Any = time.monotonic
    ) -> None:
        super().__init__(ttl_seconds=ttl_seconds, max_sessions=max_sessions, max_closed=max_closed)
        self._clock = clock
        # session id -> (record, last seen); insertion order == least recently used first.
        self._live: OrderedDict[str, tuple[SessionRecord, float]] = OrderedDict()
        self._closed: OrderedDict[str, tuple[dict[str, Any], float]] = OrderedDict()

    async def create(self, session_id: str, record: SessionRecord) -> None:
        if session_id not in self._live and len(self._live) >= self.max_sessions:
            raise SessionLimitReached(f"{self.max_sessions} sessions are live")
        self._live[session_id] = (record, self._clock())
        self._live.move_to_end(session_id)

    async def load(self, session_id: str) -> SessionRecord | None:
        entry = self._live.get(session_id)
        if entry is None:
            return None
        self._live[session_id] = (entry[0], self._clock())
        self._live.move_to_end(session_id)
        return entry[0]

    async def remove(self, session_id: str) -> SessionRecord | None:
        entry = self._live.pop(session_id, None)
        return entry[0] if entry else None

    async def mark_closed(self, session_id: str, meta: dict[str, Any]) -> None:
        self._closed[session_id] = (meta, self._clock())
        self._closed.move_to_end(session_id)
        while len(self._closed) > self.max_closed:
            self._closed.popitem(last=False)

    async def closed_meta(self, session_id: str) -> dict[str, Any] | None:
        entry = self._closed.get(session_id)
        return entry[0] if entry else None

    async def pop_expired(self) -> list[tuple[str, SessionRecord]]:
        deadline = self._clock() - self.ttl_seconds
        expired: list[tuple[str, SessionRecord]] = []
        while self._live:
            session_id, (record, seen) = next(iter(self._live.items()))
            if seen > deadline:
                break
            del self._live[session_id]
            expired.append((session_id, record))
        while self._closed and next(iter(self._closed.values()))[1] <= deadline:
            self._closed.popitem(last=False)
        return expired

    async def count(self) -> int:
        return len(self._live)

    def records(self) -> list[SessionRecord] | None:
        return [record for record, _ in self._live.values()]

    async def drain(self) -> list[tuple[str, SessionRecord]]:
        drained = [(sid, rec) for sid, (rec, _) in self._live.items()]
        self._live.clear()
        return drained
