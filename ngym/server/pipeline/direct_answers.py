"""Requests an application runs from the HTTP parser's callbacks, without an ASGI request cycle.

An application's ``ReadyAnswers.direct`` (``ngym.server.pipeline.ready_answers``) names the requests it runs this
way (the ORS front's ``/create``, ``/call`` and ``/delete``): from their method, URL and headers it gives a
``Runner``; once the request's body has arrived (at most ``READY_MAX_BODY`` bytes, read by the protocol), the
runner gives the coroutine that answers it, or None when the request is not its plain case (it then goes on to the
application as usual, body included). The coroutine answers through a ``DirectReply``, the request's stand-in for
uvicorn's request cycle: no scope, no cycle, no receive queue. It runs in a task of its own, as uvicorn runs a
request's app, so a long request (an environment's tool, a judge) still streams and pipelined requests after it
wait their turn.

What holds as on uvicorn's path: the answer is one write (a stream is chunked); an exception is answered 500 with
``repr(exc)`` as ngym's middleware answers it (closed when the answer had started), and the server keeps serving;
a handler that returns without answering is a 500; the keep-alive close (by the connection's one timer, see
``http_protocol``), the header deadline of the next request, graceful shutdown (the request finishes, then the
connection closes) and ``--limit-max-requests`` all apply.
"""

from __future__ import annotations

import contextvars
import http
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ngym.server.pipeline.error_body import error_json

log = logging.getLogger("ngym.server")

#: ASGI's ``send``: how a runner's coroutine answers (``DirectReply`` is one).
Send = Callable[[dict[str, Any]], Awaitable[None]]
#: A request's body and its ``DirectReply`` → the coroutine that answers it, or None for the application to answer.
Runner = Callable[[bytes, Send], "Coroutine[Any, Any, None] | None"]

_STATUS_LINES: dict[int, bytes] = {}


def status_line(status: int) -> bytes:
    """``HTTP/1.1 <status> <phrase>\\r\\n``, as uvicorn writes it."""
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = http.HTTPStatus(status).phrase.encode()
        except ValueError:
            phrase = b""
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status, phrase)
    return line


class _NoEvent:
    """What the protocol sets on a cycle's ``message_event`` when the connection is lost: nothing waits on it."""

    @staticmethod
    def set() -> None:
        return None


_NO_EVENT = _NoEvent()


class DirectReply:
    """One request run from the parser's callbacks: the protocol's ``cycle`` while it runs (what the protocol and
    uvicorn read of a cycle: ``response_complete``, ``keep_alive``, ``disconnected``, ``message_event``) and the
    ASGI ``send`` its coroutine answers with. An answer of one ``http.response.body`` goes out in one write with
    its head; one with ``more_body`` is chunked."""

    __slots__ = ("_head", "_protocol", "chunked", "disconnected", "keep_alive", "response_complete", "started")

    #: a cycle's fields the protocol reads: the body was read by the protocol, nothing is left to bound
    more_body = True
    message_event = _NO_EVENT

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._head: bytes | None = None
        self.started = self.chunked = self.response_complete = self.disconnected = False
        self.keep_alive = True

    async def __call__(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.started or self._head is not None:
                raise RuntimeError("the response has started already")
            fields = b"".join(b"%s: %s\r\n" % field for field in message.get("headers", ()))
            self._head = self._protocol.response_head(message["status"]) + fields
            return
        if kind != "http.response.body" or self._head is None or self.response_complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} for this response")
        body: bytes = message.get("body", b"")
        more: bool = message.get("more_body", False)
        transport = self._protocol.transport
        if not self.started:
            self.started = True
            if not more:  # the whole answer: one write
                self._finish(self._head + b"\r\n" + body)
                return
            self.chunked = True
            head = self._head + b"transfer-encoding: chunked\r\n\r\n"
            if not transport.is_closing():
                transport.write(head + (b"%x\r\n%s\r\n" % (len(body), body) if body else b""))
        elif body and not transport.is_closing():
            transport.write(b"%x\r\n%s\r\n" % (len(body), body))
        if not more:
            self._finish(b"0\r\n\r\n")
            return
        flow = self._protocol.flow
        if flow.write_paused and not transport.is_closing():
            await flow.drain()

    def _finish(self, data: bytes) -> None:
        self.response_complete = True
        protocol = self._protocol
        transport = protocol.transport
        if not transport.is_closing():
            transport.write_whole(data)
        if not self.keep_alive:  # the server is shutting down: this request was the connection's last
            transport.close()
        protocol.direct_complete()

    def failed(self, exc: BaseException | None) -> None:
        """The coroutine raised ``exc``, or returned without answering (None): a 500 naming it when nothing was
        sent yet, else the connection is closed (the client sees the answer cut)."""
        if self.response_complete:
            return
        if self.started:
            self.response_complete = True
            self._protocol.transport.close()
            self._protocol.on_response_complete()
            return
        # as ngym's middleware answers an exception
        body = json.dumps("the handler returned without answering").encode() if exc is None else error_json(exc)
        self.started = True
        self._finish(
            self._protocol.response_head(500)
            + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )


async def _serve(reply: DirectReply, work: Coroutine[Any, Any, None], what: str) -> None:
    try:
        await work
    except Exception as exc:
        log.exception("%s failed", what)
        reply.failed(exc)
        return
    if not reply.response_complete:
        log.error("%s returned without answering", what)
        reply.failed(None)


def start(reply: DirectReply, work: Coroutine[Any, Any, None], what: str, protocol: Any) -> None:
    """Run ``work`` (answering through ``reply``) in a task of its own, as uvicorn runs a request's app: kept in
    the server's tasks, which a graceful shutdown waits for. A task, not this callback, even for the work that
    never waits: code that asks for the current task (anyio, ``asyncio.timeout``, an environment's sync route run in
    a thread) needs one."""
    served = _serve(reply, work, what)
    # uvicorn's opt-in (``reset_contextvars``): no context of the server's leaks into the request
    if getattr(protocol.config, "reset_contextvars", False):
        task = protocol.loop.create_task(served, context=contextvars.Context())
    else:
        task = protocol.loop.create_task(served)
    tasks = protocol.tasks
    tasks.add(task)
    task.add_done_callback(tasks.discard)
