"""Which held episode a request names, read exactly as the proxy in front of ``--workers`` reads it.

Behind ``ngym run NAME --workers N`` HAProxy routes an OpenEnv request by the episode it names
(``ngym.server.hosting.haproxy``): the episode cookie, a WebSocket's ``?session_id=``, an MCP call's
``params.session_id``. A request that names an episode twice (two episode cookies, in one ``Cookie`` header or in
two; ``session_id`` twice in the query; ``"session_id"`` twice in one JSON object) could be routed by one name and
served by the other, so it is refused (``AmbiguousEpisode``: HTTP 400, or the protocol's error), never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ngym.server.sessions.routing import OPENENV_EPISODE_COOKIE

_COOKIE_KEY = OPENENV_EPISODE_COOKIE.encode()
_SESSION_KEY = "session_id"


class AmbiguousEpisode(ValueError):
    """A request names more than one episode."""


def episode_cookie(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The episode cookie's value among a request's raw headers (every ``Cookie`` header), or None."""
    found: list[bytes] = []
    for name, value in headers:
        if name != b"cookie" or _COOKIE_KEY not in value:
            continue
        for part in value.split(b";"):
            key, equals, text = part.strip().partition(b"=")
            if equals and key.strip() == _COOKIE_KEY:
                found.append(text.strip().strip(b'"'))
    if len(found) > 1:
        raise AmbiguousEpisode(
            f"this request carries {len(found)} {OPENENV_EPISODE_COOKIE} cookies; send exactly one (the one /reset set)"
        )
    return found[0].decode("latin-1") if found else None


def socket_session_id(values: list[str]) -> str | None:
    """The WebSocket's ``?session_id=`` (``values``: every occurrence in the query), or None."""
    if len(values) > 1:
        raise AmbiguousEpisode(f"session_id is given {len(values)} times in the query; give it once")
    return values[0] if values else None


def check_one_session_id(body: bytes) -> None:
    """Refuse a JSON body with ``"session_id"`` twice in one object (JSON parsers keep the last, the proxy reads
    the first). Only a body that holds the key twice at all is parsed again."""
    if body.count(b'"session_id"') < 2:
        return

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if sum(1 for key, _ in items if key == _SESSION_KEY) > 1:
            raise AmbiguousEpisode("session_id is given twice in one object; give it once")
        return dict(items)

    try:
        json.loads(body, object_pairs_hook=pairs)
    except ValueError as exc:
        if isinstance(exc, AmbiguousEpisode):
            raise
