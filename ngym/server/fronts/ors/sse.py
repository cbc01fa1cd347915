"""ORS's event-stream framing for ``/call`` and ``/create_session``.

A stream is ``task_id`` (the id a client resends to resume a cut stream), then the JSON answer in ``chunk``
events and a final ``end`` event, or one ``error`` event; the ``openreward`` client joins the chunks and parses
them. While the work runs, a comment line every ``PING_SECONDS`` keeps the client's 30 s read timeout from firing.
A call that finishes within ``PING_SECONDS`` (nearly all) is answered as one plain response.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Send

CHUNK_CHARS = 4096
PING_SECONDS = 10.0
#: The headers of every ORS event stream (besides its length and type).
HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
MEDIA_TYPE = "text/event-stream"


def event(name: str, data: str) -> str:
    lines = data.split("\n") if data else [""]
    return f"event: {name}\r\n" + "".join(f"data: {line}\r\n" for line in lines) + "\r\n"


def pieces(text: str) -> list[str]:
    """``text`` in pieces of about ``CHUNK_CHARS``, none starting with whitespace (the client strips a data
    line's leading whitespace, which would drop a space inside a JSON string cut there)."""
    out: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + CHUNK_CHARS, len(text))
        while end < len(text) and text[end].isspace():
            end += 1
        out.append(text[start:end])
        start = end
    return out or [""]


def result_events(result: str | None, error: str | None) -> str:
    if error is not None:
        return event("error", error)
    parts = pieces(result or "")
    return "".join(event("chunk", part) for part in parts[:-1]) + event("end", parts[-1])


def finished_text(task_id: str, result: str | None, error: str | None = None) -> str:
    """The whole stream of a finished task."""
    return event("task_id", task_id) + result_events(result, error)


def finished(task_id: str, result: str | None, error: str | None = None) -> Response:
    """The whole stream of a finished task as one response."""
    return Response(finished_text(task_id, result, error), media_type=MEDIA_TYPE, headers=HEADERS)


_ID_EVENT = b"event: task_id\r\ndata: "
_END_EVENT = b"\r\n\r\nevent: end\r\ndata: "


def finished_bytes(task_id: str, task: asyncio.Future[bytes]) -> bytes:
    """The whole stream of a finished ``task`` (a future of the JSON answer) as bytes: ``finished_text``'s, the
    answer written as it is when it fits one event (nearly every call)."""
    if task.exception() is None:
        answer = task.result()
        if len(answer) <= CHUNK_CHARS and b"\n" not in answer:
            return (
                b"event: task_id\r\ndata: " + task_id.encode() + b"\r\n\r\nevent: end\r\ndata: " + answer + b"\r\n\r\n"
            )
    return finished_text(task_id, *_outcome(task)).encode()


async def respond(task_id: str, task: asyncio.Future[bytes]) -> Response:
    """The stream of ``task`` (a future of the JSON answer): one response when it is done within
    ``PING_SECONDS``, else a stream that pings until it is."""
    done, _ = await asyncio.wait({task}, timeout=PING_SECONDS)
    if done:
        return finished(task_id, *_outcome(task))

    async def body() -> AsyncIterator[str]:
        yield event("task_id", task_id)
        while True:
            done, _ = await asyncio.wait({task}, timeout=PING_SECONDS)
            if done:
                break
            yield ": ping\r\n\r\n"
        yield result_events(*_outcome(task))

    return StreamingResponse(body(), media_type=MEDIA_TYPE, headers=HEADERS)


async def answer_inline(task_id: str, work: Awaitable[bytes], result: asyncio.Future[bytes], send: Send) -> None:
    """Run ``work`` (the JSON answer of a call) in this task and send its stream as plain ASGI, as
    ``respond`` would with ``work`` in a task of its own: one response when it is done within ``PING_SECONDS``
    (nearly every call), else the stream starts (its ``task_id``, then a ping every ``PING_SECONDS``) once it has
    run ``PING_SECONDS`` (``_Watch``: within a quarter of that more) and ends with the answer. ``result`` gets the
    outcome, for a client resuming a cut stream by ``task_id``. Running ``work`` here costs an entry in the loop's
    table of running calls; a timer per call costs more, a task and a wait for it about ten times that."""
    late = _LateStream(task_id, send)
    loop = asyncio.get_running_loop()
    watch = _WATCHES.get(loop)
    if watch is None:
        watch = _WATCHES[loop] = _Watch()
    watch.add(late, loop)
    try:
        result.set_result(await work)
    except Exception as exc:  # the call's own failure: the client reads it as the stream's error event
        result.set_exception(exc)
        result.exception()  # retrieved: a failure the client was told of is not "never retrieved"
    finally:
        watch.running.pop(late, None)
    if late.pinger is None:
        body = finished_bytes(task_id, result)
        headers = [*_RAW_HEADERS, (b"content-length", b"%d" % len(body)), _RAW_TYPE]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await late.finish(result_events(*_outcome(result)))


class _Watch:
    """The calls running inline in one event loop (``answer_inline``), and one timer for all of them: every quarter
    of ``PING_SECONDS`` while any runs, a call running ``PING_SECONDS`` or more starts its stream. No timer made
    and cancelled per call."""

    def __init__(self) -> None:
        self.running: dict[_LateStream, float] = {}
        self.timer: asyncio.TimerHandle | None = None

    def add(self, late: _LateStream, loop: asyncio.AbstractEventLoop) -> None:
        self.running[late] = loop.time()
        if self.timer is None:
            self.timer = loop.call_later(PING_SECONDS / 4, self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        for late, since in list(self.running.items()):
            if now - since >= PING_SECONDS:
                del self.running[late]
                late.start()
        self.timer = loop.call_later(PING_SECONDS / 4, self._check, loop) if self.running else None


#: each event loop's ``_Watch`` (it holds no reference to its loop: the loop's entry goes with the loop)
_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()


_RAW_HEADERS = [(k.encode(), v.encode()) for k, v in HEADERS.items()]
_RAW_TYPE = (b"content-type", f"{MEDIA_TYPE}; charset=utf-8".encode())


class _LateStream:
    """The stream of a call still running after ``PING_SECONDS``: started by a timer, pinged until finished."""

    def __init__(self, task_id: str, send: Send) -> None:
        self.task_id = task_id
        self.send = send
        self.pinger: asyncio.Task[None] | None = None
        self.head_sent = self.id_sent = False

    def start(self) -> None:
        self.pinger = asyncio.ensure_future(self._ping())

    async def _open(self) -> None:
        """The response's start and its ``task_id`` event, each sent once (the pinger may be cut between them)."""
        if not self.head_sent:
            self.head_sent = True
            await self.send({"type": "http.response.start", "status": 200, "headers": [*_RAW_HEADERS, _RAW_TYPE]})
        if not self.id_sent:
            self.id_sent = True
            await self.send(_chunk(event("task_id", self.task_id)))

    async def _ping(self) -> None:
        await self._open()
        while True:
            await asyncio.sleep(PING_SECONDS)
            await self.send(_chunk(": ping\r\n\r\n"))

    async def finish(self, events: str) -> None:
        assert self.pinger is not None
        self.pinger.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.pinger
        await self._open()
        await self.send({"type": "http.response.body", "body": events.encode(), "more_body": False})


def _chunk(text: str) -> Message:
    return {"type": "http.response.body", "body": text.encode(), "more_body": True}


class ToolRaised(Exception):
    """An environment's tool raised: the stream's ``error`` event is its message alone, as ``openreward``'s server
    sends it (any other exception is shown with its type)."""


def _outcome(task: asyncio.Future[Any]) -> tuple[str | None, str | None]:
    exc = task.exception()
    if isinstance(exc, ToolRaised):
        return None, str(exc)
    if exc is not None:
        return None, f"{type(exc).__name__}: {exc}"
    result = task.result()
    return (result.decode() if isinstance(result, bytes) else str(result)), None
