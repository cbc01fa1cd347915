"""Gymnasium episodes that started without a seed end with their last step.

NeMo Gym's Gymnasium servers (``/reset`` + ``/step``, no ``/seed_session``) keep an episode's state under the id
of the request that reset it: ngym makes that id a live session (``SessionManager.admit_lazy``), bounded by
``max_sessions`` and expired by the idle TTL. NeMo Gym's own base frees an episode's state when a step answers
``terminated`` or ``truncated``; so does ngym, for the session: without it, every finished episode stayed live for
the whole TTL and a server driven at training rates filled ``max_sessions`` within seconds.

What ends a lazily started session, read from the answers themselves (never from the request):

- a ``/step`` answered 2xx with ``terminated`` or ``truncated`` true, unless ``/reset`` advertised
  ``info.supports_explicit_close``: then the client sends ``/close`` after the episode, and that ends it;
- a ``/close`` answered 2xx.

Only the answers of lazily started sessions on these three paths are looked at, and only their first
``_MAX_WATCHED_BYTES``: a longer answer ends nothing (the TTL still does).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ngym.server.sessions.manager import LAZY_META, RequestSession

#: ``SessionRecord.meta`` key: the episode's ``/reset`` advertised ``info.supports_explicit_close``.
EXPLICIT_CLOSE_META = "explicit_close"

_RESET, _STEP, _CLOSE = "/reset", "/step", "/close"
_WATCHED_PATHS = frozenset({_RESET, _STEP, _CLOSE})
_MAX_WATCHED_BYTES = 1 << 20


class EpisodeWatch:
    """Reads one answer of a lazily started session to learn whether its Gymnasium episode ended."""

    __slots__ = ("path", "session", "status", "_chunks", "_size")

    def __init__(self, path: str, session: RequestSession, status: int) -> None:
        self.path, self.session, self.status = path, session, status
        self._chunks: list[bytes] = []
        self._size = 0

    @staticmethod
    def start(path: str, session: RequestSession, status: int) -> EpisodeWatch | None:
        """A watch for this answer, or None when it cannot end an episode (not lazy, not 2xx, another path)."""
        record = session.record
        if path not in _WATCHED_PATHS or not 200 <= status < 300 or record is None:
            return None
        if not record.meta.get(LAZY_META) or session.close_requested:
            return None
        return EpisodeWatch(path, session, status)

    def feed(self, message: Mapping[str, Any]) -> None:
        """Take one ``http.response.body`` message; on the last one, decide."""
        body = message.get("body", b"")
        if self._size <= _MAX_WATCHED_BYTES and body:
            self._chunks.append(bytes(body))
            self._size += len(body)
        if not message.get("more_body", False):
            self._decide()

    def _decide(self) -> None:
        record = self.session.record
        if record is None:
            return
        if self.path == _CLOSE:
            self.session.close_after_response()
            return
        answer = self._answer()
        if answer is None:
            return
        if self.path == _RESET:
            info = answer.get("info")
            explicit = isinstance(info, dict) and info.get("supports_explicit_close") is True
            record.meta[EXPLICIT_CLOSE_META] = explicit
        elif (answer.get("terminated") is True or answer.get("truncated") is True) and not record.meta.get(
            EXPLICIT_CLOSE_META
        ):
            self.session.close_after_response()

    def _answer(self) -> dict[str, Any] | None:
        if self._size > _MAX_WATCHED_BYTES:
            return None
        try:
            answer = json.loads(b"".join(self._chunks))
        except ValueError:
            return None
        return answer if isinstance(answer, dict) else None
