"""The one ASGI middleware every ngym server runs, outermost inside FastAPI.

In order, for each HTTP request: strip a ``/ng-rollout/<rollout id>/`` tracing prefix; bind the request to
its session (signed cookie → id, and the record for requests that may touch state); run the app; write
the session back and set its cookie on the response when the request seeded a session, or repeat the cookie it
carried when it is answered successfully with a live session held here (a 404, a 410, an error or a request that
holds no session here sets none, so no answer can hand out, move or re-pin a session); a request carrying the
session cookie twice is 400; turn any exception that escaped the app into HTTP 500 whose body is
the JSON string of ``repr(exc)``, logged with its traceback, so the server keeps serving (unless the app asks
for its exceptions to propagate: ``raise_server_exceptions``); and close the
session afterwards when the route asked for it (``/verify``). A session store that fails (``SessionStoreError``,
e.g. Redis down) or is full is HTTP 503 with a JSON ``detail`` and ``Retry-After``, never a bare 500.

It is plain ASGI rather than ``BaseHTTPMiddleware`` because it runs on every request of a hot loop.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ngym.errors import SessionStoreError
from ngym.server.pipeline.error_body import error_json
from ngym.server.pipeline.lazy_episodes import EpisodeWatch
from ngym.server.sessions.cookies import DuplicateSessionCookie
from ngym.server.sessions.lost import lost_lazy_session, send_gone
from ngym.server.sessions.manager import (
    SCOPE_KEY,
    SESSION_ID_KEY,
    SessionManager,
    current_request_session,
    is_unseeded_id,
)
from ngym.server.sessions.store import SessionLimitReached

log = logging.getLogger("ngym.server")

ROLLOUT_PREFIX = "/ng-rollout/"
_STATELESS_METHODS = {"GET", "HEAD", "OPTIONS"}
#: probes and docs: served without a session, so a health check every few seconds sets no cookie (a load balancer
#: or curl would otherwise be handed a session id it never uses).
_SESSIONLESS_PATHS = frozenset({"/", "/health", "/healthz", "/livez", "/readyz", "/docs", "/redoc", "/openapi.json"})


def strip_rollout_prefix(scope: Scope) -> None:
    """``/ng-rollout/<id>/rest`` → ``/rest``, keeping the id in ``scope["ngym.rollout_id"]``."""
    path: str = scope["path"]
    if not path.startswith(ROLLOUT_PREFIX):
        return
    rollout_id, _, rest = path[len(ROLLOUT_PREFIX) :].partition("/")
    scope["ngym.rollout_id"] = rollout_id
    scope["path"] = "/" + rest
    scope["raw_path"] = scope["path"].encode()


async def _send_unavailable(send: Send, detail: str, extra_headers: list[tuple[bytes, bytes]]) -> None:
    """HTTP 503 with a JSON ``detail`` and ``Retry-After``: the session store is down or full, not the server."""
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"retry-after", b"1"),
        *extra_headers,
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


#: ``app.state`` attribute: when true, an exception escaping the app propagates instead of becoming HTTP 500.
RAISE_SERVER_EXCEPTIONS = "ngym_raise_server_exceptions"


def raise_server_exceptions(app: Any, on: bool) -> None:
    """Let exceptions escape ``app`` (``on``) or answer them as HTTP 500 with ``repr(exc)`` (ngym's default).

    NeMo Gym's bare app (``setup_webserver()``) has no exception middleware: NeMo adds it only when it serves
    (``run_webserver``), so an environment's own tests expect an error to reach them through Starlette's
    ``TestClient`` or httpx's ``ASGITransport``. The compat layer turns this on for such apps; every app ngym
    serves (``ngym.server.pipeline.app.build_app``) turns it off again.
    """
    setattr(app.state, RAISE_SERVER_EXCEPTIONS, on)


def _raises(scope: Scope) -> bool:
    state = getattr(scope.get("app"), "state", None)  # Starlette puts the app in the scope before its middleware
    return bool(getattr(state, RAISE_SERVER_EXCEPTIONS, False))


def _cookie_header(scope: Scope) -> bytes | None:
    """The request's cookies (several ``Cookie`` headers, as HTTP/2 may send them, joined into one list)."""
    found = [bytes(value) for key, value in scope["headers"] if key == b"cookie"]
    if not found:
        return None
    return found[0] if len(found) == 1 else b"; ".join(found)


async def _send_bad_request(send: Send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _short_startup_failure(send: Send) -> Send:
    """A start-up that fails (``on_startup`` raised, e.g. a sandbox refusing to run untrusted code) is logged as one
    ``ngym: error: ...`` line instead of Starlette's traceback; the traceback with NGYM_DEBUG=1."""

    async def send_short(message: Message) -> None:
        text = message.get("message") or ""
        if message["type"] == "lifespan.startup.failed" and text.strip() and not os.environ.get("NGYM_DEBUG"):
            last = text.strip().splitlines()[-1]
            message = {**message, "message": f"ngym: error: {last.split(': ', 1)[-1]} (NGYM_DEBUG=1 for the traceback)"}
        await send(message)

    return send_short


class NgymMiddleware:
    def __init__(self, app: ASGIApp, sessions: SessionManager) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, _short_startup_failure(send) if scope["type"] == "lifespan" else send)
            return
        if scope["path"].startswith(ROLLOUT_PREFIX):
            strip_rollout_prefix(scope)
        stateless = scope["method"] in _STATELESS_METHODS
        if stateless and scope["path"] in _SESSIONLESS_PATHS:
            try:
                await self.app(scope, receive, send)
            except SessionStoreError as exc:  # /health counts live sessions: a dead store is "not ready", 503
                log.warning("%s %s: %s", scope["method"], scope["path"], exc)
                await _send_unavailable(send, f"session store unavailable: {exc}", [])
            return
        sessions = self.sessions
        store_shares_objects = sessions.store.shares_objects
        try:
            session = await sessions.bind(_cookie_header(scope), load=not stateless)
        except SessionStoreError as exc:
            log.warning("%s %s: %s", scope["method"], scope["path"], exc)
            await _send_unavailable(send, f"session store unavailable: {exc}", [])
            return
        except DuplicateSessionCookie as exc:
            sessions.traffic.count(scope["path"], 400)
            await _send_bad_request(send, str(exc))
            return
        if lost_lazy_session(scope, session):  # never restarted under its old id, stateful class or not
            sessions.traffic.count(scope["path"], 410)
            await send_gone(scope, send, session)
            return
        # Starlette's request.session, for code ported from NeMo Gym: {"session_id": ...}.
        compat = session.view
        scope["session"] = compat
        scope[SCOPE_KEY] = session
        token = current_request_session.set(session)
        started = False
        refused = False  # the answer was replaced by a 503: the app's own body is dropped
        watch: EpisodeWatch | None = None

        async def send_with_session(message: Message) -> None:
            nonlocal started, refused, watch
            if refused:
                return
            if message["type"] == "http.response.body":
                if watch is not None:
                    watch.feed(message)
            elif message["type"] == "http.response.start":
                # Ported code may switch sessions by assigning request.session["session_id"], or end one by
                # popping it (NeMo Gym's swebench_pro does on close): then the rollout's state is freed after
                # the response, as after /verify.
                switched = dict.get(compat, SESSION_ID_KEY)  # dict's own get: not a read by the environment
                if switched != session.id:
                    if switched is not None:
                        session.id = str(switched)
                        session.sets_cookie = True
                    else:
                        session.close_after_response()
                elif (
                    session.is_new
                    and compat.read
                    and session.record is None
                    and int(message["status"]) < 400
                    and not await sessions.admit_lazy(session)
                ):
                    # no session came with the request, yet ported code kept state under its id (NeMo Gym's lazy
                    # seed, e.g. a Gymnasium /reset): admit_lazy made it a live session, bounded, expiring, closed
                    # like any other, unless the store is full: then the answer is a 503, for a 200 without a
                    # session would let the next request start from nothing and be scored on state never had.
                    refused = started = True
                    sessions.traffic.count(scope["path"], 503)
                    log.warning(
                        "%s %s: %d sessions are live", scope["method"], scope["path"], sessions.store.max_sessions
                    )
                    detail = (
                        f"server is at its session limit ({sessions.store.max_sessions} sessions are live); "
                        "retry later or close finished sessions"
                    )
                    await _send_unavailable(send, detail, [])
                    return
                # Saved before the response starts, so the caller's next request (maybe to another
                # worker or replica) sees this one's changes. A store failure here is still a clean 503.
                if not store_shares_objects:
                    await sessions.persist(session)
                started = True
                sessions.traffic.count(scope["path"], int(message["status"]))
                status = int(message["status"])
                watch = EpisodeWatch.start(scope["path"], session, status)
                # A seed hands out its session's cookie; a successful answer of a live session this process holds
                # repeats the very cookie the request carried (NeMo Gym's clients copy it from every answer). Nothing
                # else sets one: a 404, a 410, an error, or a request that holds no session here.
                if session.sets_cookie or (status < 300 and not session.is_new and session.record is not None):
                    cookie = (b"set-cookie", sessions.signer.set_cookie_header(session.id))
                    message = {**message, "headers": [*message.get("headers", ()), cookie]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_session)
        except (SessionStoreError, SessionLimitReached) as exc:
            if started:
                raise
            unavailable = isinstance(exc, SessionStoreError)
            log.warning("%s %s: %s", scope["method"], scope["path"], exc)
            detail = (
                f"session store unavailable: {exc}"
                if unavailable
                else f"server is at its session limit ({exc}); retry later or close finished sessions"
            )
            await _send_unavailable(send, detail, [])
        except Exception as exc:
            if _raises(scope):
                raise
            log.exception("%s %s failed", scope["method"], scope["path"])
            if started:
                raise
            body = error_json(exc)
            await send_with_session(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
                }
            )
            await send({"type": "http.response.body", "body": body})
        finally:
            current_request_session.reset(token)
            if (
                sessions.on_unseeded_done is not None
                and not session.sets_cookie
                and session.record is None
                and is_unseeded_id(session.id)
                and session.is_new
            ):
                # the id this request got was never handed out: nothing can name it again, so what the environment
                # keyed by it (ported NeMo Gym code's ``self.x[request.session["session_id"]]``) is freed now
                try:
                    await sessions.on_unseeded_done(session.id)
                except Exception:
                    log.exception(
                        "freeing what %s %s kept under its one-off session id failed", scope["method"], scope["path"]
                    )
            if session.close_requested:
                try:
                    await sessions.close(session.id)
                except SessionStoreError as exc:  # the idle-TTL sweep closes it once the store is back
                    log.warning("closing session %s after the response failed: %s", session.id, exc)
