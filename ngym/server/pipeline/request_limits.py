"""Request body limits in the ASGI layer: a size cap enforced while the body streams in, and a read deadline.

A body larger than ``max_body_bytes`` is refused with 413 before it is parsed: at once when its
``Content-Length`` says so, else as soon as the bytes received pass the cap, so a huge body never reaches a
JSON parser (which would hold the event loop, and every other rollout, for as long as it takes). A body that
has not fully arrived ``body_timeout_seconds`` after the request started is 408. Both answers close the
connection. A client that goes away mid-body is one INFO line, not an error with a traceback.

Header size and header/idle timeouts are the HTTP server's job (``ngym.server.pipeline.http_protocol``); this middleware
covers what only the application sees: the body. That HTTP server also tells it, in the scope, when it already
holds a request's whole body (``BODY_BYTES_KEY``): almost every request of a rollout, whose body comes in the same
packet as its headers. Such a body within the cap has nothing left to bound (no byte still to come, nothing to
wait for), so it goes to the app untouched. Served any other way (another ASGI server, a test client), every body
is bounded here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("ngym.server")

#: 32 MiB: a long multi-turn trajectory with token ids and log-probs is a few MB; a body this size already
#: takes seconds to validate.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_BODY_TIMEOUT_SECONDS = 60.0
# Enforced by the HTTP server (ngym.server.pipeline.http_protocol); here so the config can name them without
# importing uvicorn.
DEFAULT_HEADER_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS = 5.0  # uvicorn's own default

_CLOSE = {"connection": "close"}

#: Scope key: the size of the request's body when the HTTP server already holds all of it before the app runs
#: (set by ``ngym.server.pipeline.http_protocol``; absent otherwise).
BODY_BYTES_KEY = "ngym.body_bytes"


class BodyTooLarge(HTTPException):
    """413: raised from ``receive`` (an ``HTTPException``, so FastAPI's body parsing passes it on as is)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"request body is larger than {limit} bytes (server setting max_request_body_bytes)", _CLOSE
        )


class BodyTimeout(HTTPException):
    """408: the body did not arrive in time."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            408,
            f"request body not received within {seconds:g} s (server setting request_body_timeout_seconds)",
            _CLOSE,
        )


class ClientGone(HTTPException):
    """The client disconnected before its body was complete (answered to nobody; logged once)."""

    def __init__(self) -> None:
        super().__init__(400, "client disconnected before the request body was complete", _CLOSE)


class RequestLimitsMiddleware:
    """Plain ASGI: each HTTP request with a body reads it through a ``_LimitedBody`` (the size cap and the deadline).

    It runs on every tool call, so the common case costs little: a body the HTTP server already holds whole
    (``BODY_BYTES_KEY``) within the cap, or a declared empty one, is passed through untouched, and there is no timer
    per request. The deadline is kept by one timer for the whole app
    (``_arm``), set for the earliest deadline of the bodies being waited for at that moment; a body not complete
    by its deadline is found when the timer fires (the wait is cancelled and becomes a 408) or at its next read.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout_seconds: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_seconds = body_timeout_seconds
        #: The bodies whose ``receive`` is being awaited right now (the only ones a timer can cut short).
        self._waiting: set[_LimitedBody] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._timer_loop: asyncio.AbstractEventLoop | None = None  # an app may outlive a loop (test clients)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        buffered = scope.get(BODY_BYTES_KEY)
        if buffered is not None and buffered <= self.max_body_bytes:  # complete, within the cap: nothing to bound
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None:
            if declared > self.max_body_bytes:
                await _answer(send, BodyTooLarge(self.max_body_bytes))
                return
            if declared == 0:  # no body to bound
                await self.app(scope, receive, send)
                return
        body = _LimitedBody(self, scope, receive, send, declared)
        try:
            await self.app(scope, body.receive, body.send)
        except (BodyTooLarge, BodyTimeout, ClientGone) as exc:  # raised where no exception handler answered
            if not body.started and not isinstance(exc, ClientGone):
                await _answer(send, exc)
        finally:
            self._waiting.discard(body)

    def _arm(self, deadline: float, loop: asyncio.AbstractEventLoop) -> None:
        """Make sure the one timer fires no later than ``deadline``."""
        if self._timer is not None:
            if self._timer_at <= deadline and self._timer_loop is loop:
                return
            self._timer.cancel()
        self._timer, self._timer_at = loop.call_at(deadline, self._expire_overdue, loop), deadline
        self._timer_loop = loop

    def _expire_overdue(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        pending = [body for body in self._waiting if not body.expire_if_overdue(now)]
        if pending:
            self._arm(min(body.deadline for body in pending), loop)


class _LimitedBody:
    """One request's ``receive`` with the size cap and the read deadline (and its ``send``, which notes whether the
    response started). Attributes rather than closures: made once per request with a body."""

    __slots__ = (
        "limits",
        "scope",
        "inner",
        "send_inner",
        "declared",
        "deadline",
        "received",
        "complete",
        "expired",
        "waiting",
        "started",
    )

    def __init__(
        self, limits: RequestLimitsMiddleware, scope: Scope, receive: Receive, send: Send, declared: int | None
    ) -> None:
        self.limits = limits
        self.scope = scope
        self.inner = receive
        self.send_inner = send
        self.declared = declared
        self.deadline = asyncio.get_running_loop().time() + limits.body_timeout_seconds
        self.received = 0
        self.complete = False
        self.expired = False
        self.waiting: asyncio.Task[Any] | None = None
        self.started = False

    def expire_if_overdue(self, now: float) -> bool:
        """Called by the timer for a body being waited for: past its deadline, cut the wait short."""
        if now < self.deadline:
            return False
        self.expired = True
        if self.waiting is not None:  # suspended in receive: the cancellation lands there, and becomes a 408
            self.waiting.cancel()
        return True

    async def receive(self) -> Message:
        if self.complete:  # the body is in; the app may be waiting for the disconnect, with no deadline
            return await self.inner()
        message: Message = {}
        if not self.expired:
            limits = self.limits
            loop = asyncio.get_running_loop()
            if loop.time() >= self.deadline:
                self.expired = True
            else:
                self.waiting = asyncio.current_task()
                limits._waiting.add(self)
                if limits._timer is None or limits._timer_loop is not loop:  # else it fires no later than ours
                    limits._arm(self.deadline, loop)
                try:
                    message = await self.inner()
                except asyncio.CancelledError:
                    # Ours (the deadline) unless someone else cancelled the task too.
                    if not self.expired or (self.waiting is not None and self.waiting.uncancel() > 0):
                        raise
                finally:
                    self.waiting = None
                    limits._waiting.discard(self)
        scope = self.scope
        if self.expired:
            self.complete = True
            seconds = self.limits.body_timeout_seconds
            log.info("%s %s: body not complete after %gs", scope["method"], scope["path"], seconds)
            raise BodyTimeout(seconds)
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.limits.max_body_bytes:
                self.complete = True
                raise BodyTooLarge(self.limits.max_body_bytes)
            self.complete = not message.get("more_body", False)
        elif message["type"] == "http.disconnect":
            self.complete = True
            log.info(
                "%s %s: client disconnected after %d body bytes%s",
                scope["method"],
                scope["path"],
                self.received,
                f" of {self.declared}" if self.declared is not None else "",
            )
            raise ClientGone()
        return message

    async def send(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self.send_inner(message)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _answer(send: Send, exc: HTTPException) -> None:
    body = json.dumps({"detail": exc.detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
