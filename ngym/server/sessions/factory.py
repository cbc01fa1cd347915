"""Pick the session store for a server: ``memory`` built in, any other URL from a plugin's hook."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from ngym.errors import ConfigError
from ngym.plugins import manager as plugin_manager
from ngym.server.sessions.store import MemorySessionStore, SessionStore

if TYPE_CHECKING:
    from ngym.server.pipeline.resources import SimpleResourcesServer


def create_session_store(url: str, server: SimpleResourcesServer) -> SessionStore:
    """The store for ``url`` (``memory``, or e.g. ``redis://...`` handled by an ``ngym_session_store`` hook)."""
    ttl, bound = server.config.session_ttl_seconds, server.config.max_sessions
    if url in ("memory", "memory://", ""):
        return MemorySessionStore(ttl_seconds=ttl, max_sessions=bound, max_closed=server.config.max_closed_sessions)
    stores: list[SessionStore | None] = plugin_manager.get_plugin_manager().hook.ngym_session_store(
        url=url, server=server
    )
    for store in stores:
        if store is not None:
            return store
    raise ConfigError(
        f"no installed plugin provides a session store for {redact_url(url)!r} (is ngym-redis installed?)"
    )


def redact_url(url: str) -> str:
    """The URL without its password, for messages (also when the rest of the URL is malformed)."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hostport}"))
