"""Per-rollout sessions: signed cookies, stores with a lifecycle, and the manager that binds requests to them."""

from ngym.server.sessions.cookies import SESSION_SECRET_ENV, CookieSigner, resolve_secret
from ngym.server.sessions.manager import (
    SESSION_ID_KEY,
    RequestSession,
    SessionConflict,
    SessionManager,
    current_request_session,
)
from ngym.server.sessions.store import MemorySessionStore, SessionLimitReached, SessionRecord, SessionStore

__all__ = [
    "SESSION_ID_KEY",
    "SESSION_SECRET_ENV",
    "CookieSigner",
    "MemorySessionStore",
    "RequestSession",
    "SessionConflict",
    "SessionLimitReached",
    "SessionManager",
    "SessionRecord",
    "SessionStore",
    "current_request_session",
    "resolve_secret",
]
