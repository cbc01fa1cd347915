"""The hook implementation: ``redis://`` and ``rediss://`` session-store URLs become a ``RedisSessionStore``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ngym import hookimpl

if TYPE_CHECKING:
    from ngym import SimpleResourcesServer
    from ngym.plugin_api import SessionStore

SCHEMES = ("redis", "rediss")


@hookimpl
def ngym_session_store(url: str, server: SimpleResourcesServer) -> SessionStore | None:
    """A Redis store for ``redis://`` / ``rediss://`` URLs; None for any other scheme."""
    scheme = url.partition("://")[0].lower()
    if scheme not in SCHEMES:
        return None
    from ngym_redis.store import RedisSessionStore

    return RedisSessionStore.for_server(url, server)
