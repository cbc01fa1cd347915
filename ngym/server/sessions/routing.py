"""Which worker (or replica, or host) of a routing set holds a session: a pure function of the session id.

A set of N processes that keep sessions in their own memory sits behind one HAProxy (``ngym run --workers N``,
a Ray environment's replicas, hosts). Process I of N is told its *slot* ``I/N`` (``NGYM_ROUTE_SLOT``). A session
id belongs to slot ``crc32(id) mod N``, the same CRC-32 HAProxy's ``crc32`` converter computes, so the proxy
routes every request from what the request carries (the id inside the signed session cookie, the typed body's
``resources_session_id``, the ``/ng-rollout/<id>/`` prefix) and learns nothing from answers:

- an id ngym makes at a seed is drawn at random until it hashes to the seeding process's own slot (N draws on
  average, under a microsecond each), so the cookie that seed hands out routes back to that process;
- a caller-chosen id (NeMo Gym 0.7's typed seed) hashes to some slot, and HAProxy sends its seed there;
- a request whose id names another slot reached this process only because its own one is down (or the caller
  went around the proxy): it is answered as lost (410, or a verify masked ``session_lost``), and a typed seed
  or close of such an id is refused (503), never honoured here.

One process on its own is slot ``0/1``: every id is its own.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

from ngym.errors import ConfigError

#: ``I/N``: this process is slot I of a routing set of N (set by ``ngym run --workers``, the Ray engine, or by hand
#: for hosts behind one HAProxy configured by ``ngym.server.hosting.haproxy.haproxy_config``). Nested sets (a Ray
#: replica that itself runs ``--workers``) chain levels, outermost first: ``R/NR,W/NW``.
ROUTE_SLOT_ENV = "NGYM_ROUTE_SLOT"
#: The cookie naming an OpenEnv episode held between HTTP requests (``/openenv/reset`` sets it); its value is an id
#: drawn like a session id, so the proxy routes by it (``ngym.server.fronts.openenv``).
OPENENV_EPISODE_COOKIE = "ngym-openenv-episode"
#: Where every app serves ORS (``ngym.server.fronts.ors.mount``), and the first path segments of the ORS routes
#: the ``openreward`` SDK sends at the root (with an ``X-Session-ID`` header or asking for an event stream). Only
#: these requests are ORS's: the proxy routes them by ``X-Session-ID`` exactly when the server reads it, so a
#: stray ``X-Session-ID`` (a gateway's tracing header) beside a session cookie never sends a request elsewhere.
ORS_MOUNT_PATH = "/ors"
ORS_ROOT_SEGMENTS = frozenset(
    {
        "create_session", "delete_session", "create", "delete", "ping", "call", "prompt", "messages", "task_tools",
        "tools", "splits", "tasks", "num_tasks", "task", "task_range", "score_group", "list_environments", "version",
    }
)  # fmt: skip


def route_hash(session_id: str) -> int:
    """CRC-32 of the id's UTF-8 bytes: HAProxy's ``crc32`` converter."""
    return zlib.crc32(session_id.encode())


def slot_of(session_id: str, count: int, stride: int = 1) -> int:
    """The slot a session id routes to among ``count`` at a level whose outer levels multiply to ``stride``:
    ``(crc32(id) / stride) mod count`` (HAProxy: ``crc32,div(stride),mod(count)``)."""
    return (route_hash(session_id) // stride) % count if count > 1 else 0


@dataclass(frozen=True)
class RouteSlot:
    """This process's place in its routing set(s): ``levels`` of (index, count), outermost first."""

    levels: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, text: str) -> RouteSlot:
        """``"I/N"`` or ``"I/N,J/M"`` (``ConfigError`` naming the variable when it is malformed)."""
        levels = []
        for part in text.split(","):
            index, slash, count = part.strip().partition("/")
            try:
                level = (int(index), int(count))
            except ValueError:
                level = (-1, 0)
            if not slash or level[1] < 1 or not 0 <= level[0] < level[1]:
                raise ConfigError(f"{ROUTE_SLOT_ENV}={text!r}: expected I/N with 0 <= I < N (e.g. 0/2), or I/N,J/M")
            levels.append(level)
        return cls(tuple(levels))

    @classmethod
    def from_env(cls) -> RouteSlot:
        text = os.environ.get(ROUTE_SLOT_ENV, "").strip()
        return cls.parse(text) if text else cls()

    def __str__(self) -> str:
        return ",".join(f"{index}/{count}" for index, count in self.levels)

    def inner(self, index: int, count: int) -> RouteSlot:
        """The slot of worker ``index`` of ``count`` inside this one (``ngym run --workers`` under a replica)."""
        return RouteSlot((*self.levels, (index, count)))

    @property
    def stride(self) -> int:
        """The product of every level's count: the divisor an inner level's ``div`` starts from."""
        product = 1
        for _, count in self.levels:
            product *= count
        return product

    @property
    def count(self) -> int:
        """How many processes share the routing space (1: this one holds every id)."""
        return self.stride

    def owns(self, session_id: str) -> bool:
        """Whether requests carrying ``session_id`` are routed to this process."""
        if self.stride <= 1:
            return True
        stride, value = 1, route_hash(session_id)
        for index, count in self.levels:
            if (value // stride) % count != index:
                return False
            stride *= count
        return True

    def new_id(self, prefix: str = "") -> str:
        """``prefix`` + a random 128-bit id (hex) that routes to this process (``count`` draws on average)."""
        while True:
            candidate = prefix + os.urandom(16).hex()
            if self.owns(candidate):
                return candidate

    def describe(self) -> str:
        return " within ".join(f"slot {index} of {count}" for index, count in reversed(self.levels)) or "the only slot"


__all__ = [
    "OPENENV_EPISODE_COOKIE",
    "ORS_MOUNT_PATH",
    "ORS_ROOT_SEGMENTS",
    "ROUTE_SLOT_ENV",
    "RouteSlot",
    "route_hash",
    "slot_of",
]
