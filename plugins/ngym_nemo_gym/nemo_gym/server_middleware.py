"""The two middlewares NeMo Gym's servers add when they are served, for code that builds its app by hand.

NeMo Gym's ``SimpleServer.setup_exception_middleware(app)`` and ``setup_cancellation_middleware(app)`` are
called by its launcher after ``setup_webserver``; environments' tests that build a "production" app call them
too. ngym's own servers get the same effects from ``ngym.server.pipeline.middleware.NgymMiddleware``; these are for apps
that do not go through it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import ClientResponseError
from anyio import create_task_group
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)


def add_exception_middleware(app: FastAPI, server_key: str) -> None:
    """An exception escaping a route becomes a 500 whose JSON body says what happened, and the server keeps
    serving: a failed call to another server gives that server's answer (``response_content``), a cancelled
    request ``"Request was cancelled"``, anything else ``repr(exc)`` (what a model sees as the tool's output)."""

    @app.middleware("http")
    async def exception_handling_middleware(request: Request, call_next: Any) -> Any:
        try:
            return await call_next(request)
        except ClientResponseError as exc:
            content = getattr(exc, "response_content", None)
            log.error("%s: a call to an inner server failed: %s (status %s)", server_key, exc, exc.status)
            return JSONResponse(
                content=f"Hit an exception in {server_key} calling an inner server: {content}", status_code=500
            )
        except asyncio.CancelledError:
            return JSONResponse(content="Request was cancelled", status_code=500)
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.url.path)
            return JSONResponse(content=repr(exc), status_code=500)


class ClientDisconnectCancellationMiddleware:
    """Cancel a request's handler when its client disconnects before the response is complete (a rollout that
    gave up should not keep a judge call or a sandbox running)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.num_cancelled = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # This middleware alone reads the real receive channel and forwards request messages to the app, so a
        # disconnect is seen even while the handler never calls receive() again.
        forwarded: asyncio.Queue[Message] = asyncio.Queue()
        disconnected = asyncio.Event()
        complete = asyncio.Event()

        async def send_unless_gone(message: Message) -> None:
            if disconnected.is_set():
                return
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                complete.set()

        async with create_task_group() as group:

            async def run_app() -> None:
                try:
                    await self.app(scope, forwarded.get, send_unless_gone)
                finally:
                    group.cancel_scope.cancel()

            async def watch() -> None:
                while True:
                    message = await receive()
                    if message["type"] != "http.disconnect":
                        await forwarded.put(message)
                        continue
                    # Servers also report http.disconnect once the response is sent: only an early one cancels.
                    if complete.is_set():
                        return
                    await forwarded.put(message)
                    disconnected.set()
                    self.num_cancelled += 1
                    log.info('"%s %s" 499 client disconnected', scope["method"], scope["path"])
                    group.cancel_scope.cancel()
                    return

            group.start_soon(run_app)
            group.start_soon(watch)
