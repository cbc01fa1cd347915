"""Request body limits in the ASGI layer: a size cap enforced while the body streams in, and a read deadline.

A body larger than ``max_body_bytes`` is refused with 413 before it is parsed: at once when its
``Content-Length`` says so, else as soon as the bytes received pass the cap, so a huge body never reaches a
JSON parser (which would hold the event loop, and every other rollout, for as long as it takes). A body that
has not fully arrived ``body_timeout_seconds`` after the request started is 408. Both answers close the
connection. A client that goes away mid-body is one INFO line, not an error with a traceback.

Header size and header/idle timeouts are the HTTP server's job (``ngym.server.http_protocol``); this middleware
covers what only the application sees: the body.
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
# Enforced by the HTTP server (ngym.server.http_protocol); here so the config can name them without importing uvicorn.
DEFAULT_HEADER_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS = 5.0  # uvicorn's own default

_CLOSE = {"connection": "close"}


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
    """Plain ASGI: wraps ``receive`` of each HTTP request with the size cap and the read deadline."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout_seconds: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_seconds = body_timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _answer(send, BodyTooLarge(limit))
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_seconds
        received = 0
        complete = False
        # One timer per request (not an asyncio.timeout per receive: this runs on every tool call). When it
        # fires while the app waits in receive, that wait is cancelled and becomes a 408.
        timer: asyncio.TimerHandle | None = None
        expired = False
        waiting: asyncio.Task[Any] | None = None

        def expire() -> None:
            nonlocal expired
            expired = True
            if waiting is not None:  # suspended at the await below: the cancellation lands right there
                waiting.cancel()

        async def limited_receive() -> Message:
            nonlocal received, complete, timer, waiting
            if complete:  # the body is in; the app may be waiting for the disconnect, with no deadline
                return await receive()
            if timer is None:
                timer = loop.call_at(deadline, expire)
            message: Message = {}
            if not expired:
                waiting = asyncio.current_task()
                try:
                    message = await receive()
                except asyncio.CancelledError:
                    # Ours (the deadline) unless someone else cancelled the task too.
                    if not expired or (waiting is not None and waiting.uncancel() > 0):
                        raise
                finally:
                    waiting = None
            if expired:
                complete = True
                log.info(
                    "%s %s: body not complete after %gs", scope["method"], scope["path"], self.body_timeout_seconds
                )
                raise BodyTimeout(self.body_timeout_seconds)
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    complete = True
                    timer.cancel()
                    raise BodyTooLarge(limit)
                complete = not message.get("more_body", False)
                if complete:
                    timer.cancel()
            elif message["type"] == "http.disconnect":
                complete = True
                timer.cancel()
                log.info(
                    "%s %s: client disconnected after %d body bytes%s",
                    scope["method"],
                    scope["path"],
                    received,
                    f" of {declared}" if declared is not None else "",
                )
                raise ClientGone()
            return message

        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except (BodyTooLarge, BodyTimeout, ClientGone) as exc:  # raised where no exception handler answered
            if not started and not isinstance(exc, ClientGone):
                await _answer(send, exc)
        finally:
            if timer is not None:
                timer.cancel()


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
