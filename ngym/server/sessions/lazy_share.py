"""The share of the session store that lazily started sessions may hold, so junk traffic never refuses a seed.

NeMo Gym starts a session lazily: a request without a session whose code keeps state under
``request.session["session_id"]`` (a Gymnasium ``/reset``, a counter tool called without a seed) makes that id a
live session (``SessionManager.admit_lazy``). Anyone can send such requests, so they are held apart from seeded
sessions:

- at most ``max_lazy_sessions`` of them live in this process (default: ``max_sessions``); a new one past it closes
  the least recently used lazy session first (its close hook runs, as on any close), or, with
  ``lazy_sessions_full: refuse``, is answered 503 (live lazy sessions are then never closed for a newer one, but a
  flood of cookie-less calls refuses new lazy starts until its sessions expire);
- an explicit seed (``/seed_session``, a typed seed) that finds the store full closes the least recently used lazy
  session to make room, so seeds always have room up to ``max_sessions`` whatever cookie-less traffic arrived;
- only when every live session was seeded explicitly is a lazy start refused (503), as a seed is.

Each eviction is logged and counted (``/health``'s ``lazy_sessions.evicted``). A request that later carries an
evicted session's cookie is answered as a lost session (410 for a tool call, a masked verify), never started anew.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

log = logging.getLogger("ngym.sessions")


class LazyShare:
    """The lazily started sessions this process admitted, least recently used first (ids only)."""

    __slots__ = ("limit", "refuse_when_full", "evicted", "_ids")

    def __init__(self, limit: int, refuse_when_full: bool = False) -> None:
        #: most lazily started sessions held at once
        self.limit = limit
        #: a lazy start past ``limit`` is refused (503) instead of closing the least recently used lazy session
        self.refuse_when_full = refuse_when_full
        #: lazily started sessions closed to make room (for a newer lazy one, or for a seed)
        self.evicted = 0
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._ids

    def add(self, session_id: str) -> None:
        """Note a session started lazily (most recently used)."""
        self._ids[session_id] = None

    def touch(self, session_id: str) -> None:
        """A request of this lazy session arrived: it becomes the most recently used."""
        if session_id in self._ids:
            self._ids.move_to_end(session_id)

    def discard(self, session_id: str) -> None:
        """The session closed (any way): it no longer counts."""
        self._ids.pop(session_id, None)

    def full(self) -> bool:
        """Whether a new lazy session needs an older one evicted first."""
        return len(self._ids) >= self.limit

    def oldest(self) -> str | None:
        """Take the least recently used lazy session's id out of the share (None when there is none)."""
        if not self._ids:
            return None
        session_id, _ = self._ids.popitem(last=False)
        return session_id

    def as_dict(self) -> dict[str, int]:
        """``/health``'s ``lazy_sessions``."""
        return {"live": len(self._ids), "limit": self.limit, "evicted": self.evicted}


def lazy_share_of(max_lazy_sessions: int | None, max_sessions: int, full: str) -> LazyShare:
    """The share a server's settings give (``max_lazy_sessions``, ``lazy_sessions_full``)."""
    return LazyShare(min(max_lazy_sessions or max_sessions, max_sessions), refuse_when_full=full == "refuse")
