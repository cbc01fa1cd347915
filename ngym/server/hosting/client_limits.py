"""What a server allows one client, as HAProxy in front of its workers must enforce it.

HAProxy reads each request's line, headers and (up to its buffer) body before any worker sees it, so a slow or
oversized client meets HAProxy's limits, never the worker's. These are the server's own settings
(``BaseResourcesServerConfig``: ``max_request_header_bytes``, ``request_header_timeout_seconds``,
``request_body_timeout_seconds``, ``keep_alive_timeout_seconds``) carried to HAProxy's configuration, so
``ngym run NAME --workers N`` and a fleet's front hold a client to what one process would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ngym.server.pipeline.request_limits import (
    DEFAULT_BODY_TIMEOUT_SECONDS,
    DEFAULT_HEADER_TIMEOUT_SECONDS,
    DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS,
    DEFAULT_MAX_HEADER_BYTES,
)


@dataclass(frozen=True)
class ClientLimits:
    """A server's HTTP limits per client (the defaults are ``BaseResourcesServerConfig``'s)."""

    #: request line + headers larger than this: 431
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    #: a request whose line and headers are not complete this long after the connection opened or went idle
    header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS
    #: a body not complete this long after its headers: 408
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS
    #: an idle keep-alive connection is closed after this
    keep_alive_seconds: float = DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS

    @classmethod
    def from_settings(cls, setting: Callable[[str], Any]) -> ClientLimits:
        """From a server's settings: ``setting(name)`` gives the value of ``BaseResourcesServerConfig``'s field
        ``name``."""
        return cls(
            max_header_bytes=int(setting("max_request_header_bytes")),
            header_timeout_seconds=float(setting("request_header_timeout_seconds")),
            body_timeout_seconds=float(setting("request_body_timeout_seconds")),
            keep_alive_seconds=float(setting("keep_alive_timeout_seconds")),
        )

    @property
    def body_timeout_answer(self) -> str:
        """The JSON body of the 408 for a body that did not arrive in time, as a worker words it."""
        return (
            f'{{"detail":"request body not received within {self.body_timeout_seconds:g} s '
            '(server setting request_body_timeout_seconds)"}'
        )


def haproxy_time(seconds: float) -> str:
    """``seconds`` as an HAProxy time (milliseconds, at least 1)."""
    return f"{max(1, round(seconds * 1000))}ms"


__all__ = ["ClientLimits", "haproxy_time"]
