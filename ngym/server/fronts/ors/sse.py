"""ORS's event-stream framing for ``/call`` and ``/create_session``.

A stream is ``task_id`` (the id a client resends to resume a cut stream), then the JSON answer in ``chunk``
events and a final ``end`` event, or one ``error`` event; the ``openreward`` client joins the chunks and parses
them. While the work runs, a comment line every ``PING_SECONDS`` keeps the client's 30 s read timeout from firing.
A call that finishes within ``PING_SECONDS`` (nearly all) is answered as one plain response.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import Response, StreamingResponse

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


async def respond(task_id: str, task: asyncio.Future[Any]) -> Response:
    """The stream of ``task`` (a future of the JSON answer text): one response when it is done within
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


def _outcome(task: asyncio.Future[Any]) -> tuple[str | None, str | None]:
    exc = task.exception()
    if exc is not None:
        return None, f"{type(exc).__name__}: {exc}"
    result: str = task.result()
    return result, None
