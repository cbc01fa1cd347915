"""Requests an application answers from their method, URL and headers alone, with bytes it has ready, and
requests it runs from the HTTP parser's callbacks without an ASGI request cycle, or routes to an ASGI app of its own.

The HTTP protocol (``ngym.server.pipeline.http_protocol``, httptools) asks an application's ``ReadyAnswers``
before it starts any ASGI work for a request: an answer is written from the parser's callbacks (no scope, request
cycle, task or middleware), a request declined goes on to the application as usual. The ORS front answers its
requests that run no environment code this way (``ngym.server.fronts.ors.fast``). Its requests that do (``/create``,
``/call``, ``/delete``) are run by ``direct`` from the same callbacks, once their body is in, without an ASGI
request cycle (``ngym.server.pipeline.direct_answers``); those it declines (a body over ``READY_MAX_BODY``) are
routed by ``app_for`` to the front's own ASGI handler, run in uvicorn's request cycle as any request is, past the
layers above the front that have nothing to do for them. This module imports nothing: an app puts its
``ReadyAnswers`` on its ``state`` when it is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: A request's method, URL (path and query, as sent) and headers (lower-case names) → the rest of a 200 answer
#: after the status line and the server's default headers (its own headers, the blank line, the body), or None to
#: let the application answer it.
Answerer = Callable[[bytes, bytes, list[tuple[bytes, bytes]]], "bytes | None"]

#: A request's method, URL and headers, and the application the server runs (the fallback) → the ASGI app to run
#: this request with instead, or None for the application itself.
Router = Callable[[bytes, bytes, list[tuple[bytes, bytes]], Any], Any]

#: A request's method, URL and headers → the ``direct_answers.Runner`` to run it with once its body has arrived,
#: or None for the usual path.
Direct = Callable[[bytes, bytes, list[tuple[bytes, bytes]]], Any]

#: The largest body (declared ``content-length``) a ready answer may leave unread; larger ones go to the app.
READY_MAX_BODY = 4096


class ReadyAnswers:
    """Where an application puts its ``Answerer`` (``answer``; None until it has one, e.g. until a front that is
    built on its first request is built). The protocol asks it only for keep-alive HTTP/1.1 requests with no
    request in progress on the connection, no ``Expect: 100-continue``, no upgrade, no chunked body and a declared
    body of at most ``READY_MAX_BODY`` bytes; the answer is written when the request's body has arrived (dropped
    unread)."""

    def __init__(self) -> None:
        self.answer: Answerer | None = None
        #: for a request the ``answer`` declined, under the same conditions: its ``direct_answers.Runner``, or None
        self.direct: Direct | None = None
        #: for a keep-alive HTTP/1.1 request (no upgrade) ``direct`` was not asked about (a body over
        #: ``READY_MAX_BODY``, or no ``direct``): the app to run it with
        self.app_for: Router | None = None


def ready_answers(app: Any) -> ReadyAnswers:
    """The ``ReadyAnswers`` of an application (a Starlette/FastAPI app: on its ``state``), made on first use."""
    found: ReadyAnswers | None = getattr(app.state, "ngym_ready_answers", None)
    if found is None:
        found = app.state.ngym_ready_answers = ReadyAnswers()
    return found
