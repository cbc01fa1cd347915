"""Per-session budgets every environment gets: the size of one tool call, the bytes one session may send in tool
calls, and the size of one tool answer.

A tool call is a POST to any route but the standard ones (``/seed_session``, ``/verify``, ``/close_session``,
``/aggregate_metrics``, ``/run``). Whatever an environment keeps for a session comes from its tool calls' arguments (or
from answers it computes from them), so bounding what one session may send bounds what it can make the server
hold, for every environment, with no accounting of its own:

- ``max_tool_call_bytes``: a tool call whose body (its arguments) is larger is 413 before the tool runs (at once
  when the length is declared, else as soon as the bytes received pass it);
- ``max_session_tool_bytes``: the bytes of all tool calls of one seeded session; the call that would pass it is
  413 before the tool runs, and so is every later one (the session keeps what it had; seed a new one). The
  count lives in the session's record (``meta``), so it holds across workers with a shared store;
- ``max_tool_answer_bytes``: a tool answer whose declared length is larger is replaced by a 413 naming the
  setting. An answer streamed without a length (``StreamingResponse``, chunked) is counted as it is sent: its
  headers wait for its first chunk (except an event stream's, whose client waits for them: MCP), so a first
  chunk past the cap is still a 413; past the cap later (the status already sent), the stream is cut there: the
  connection is closed without the chunked encoding's last chunk, so no client can read the truncated answer as
  complete, and one warning is logged.

``/health`` reports what the sessions of this process have sent (``session_bytes``: total, largest, limit), for
the in-memory store. An environment whose state grows in other ways adds its own bound (e.g. workplace_assistant's
``max_state_bytes``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ngym.server.pipeline.request_limits import BODY_BYTES_KEY
from ngym.server.sessions.manager import SCOPE_KEY, RequestSession

log = logging.getLogger("ngym.serve")

#: 4 MiB: far more than any tool argument a model writes (a 1,000,000-character program is 1 MB).
DEFAULT_MAX_TOOL_CALL_BYTES = 4 * 1024 * 1024
#: 64 MiB of tool-call arguments per session.
DEFAULT_MAX_SESSION_TOOL_BYTES = 64 * 1024 * 1024
#: 16 MiB: one tool answer.
DEFAULT_MAX_TOOL_ANSWER_BYTES = 16 * 1024 * 1024
#: Where a session's count of tool-call bytes is kept in its record's ``meta``.
META_KEY = "tool_call_bytes"
#: Not tool calls: bodies that carry a row or a whole trajectory (``/run``: a NeMo Gym agent's or environment's
#: whole rollout).
STANDARD_POST_PATHS = frozenset({"/seed_session", "/verify", "/close_session", "/aggregate_metrics", "/run"})


class _AnswerCut(Exception):
    """Raised into the environment's streaming code when its answer passes ``max_tool_answer_bytes`` after the
    status was sent: it stops the stream; the middleware then ends the response without completing it."""


class BudgetExceeded(HTTPException):
    """413 naming the setting (an ``HTTPException``, so FastAPI's body reading passes it on as is)."""

    def __init__(self, detail: str) -> None:
        super().__init__(413, detail, {"connection": "close"})


def _declared_length(scope: Scope) -> int | None:
    buffered = scope.get(BODY_BYTES_KEY)
    if buffered is not None:
        return int(buffered)
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def call_too_large(size: int, limit: int) -> str:
    return f"tool call body is {size} bytes; the limit is {limit} bytes (server setting max_tool_call_bytes)"


def session_over_budget(used: int, size: int, limit: int) -> str:
    return (
        f"this session has sent {used} bytes in tool calls and this call adds {size}; a session may send at most "
        f"{limit} bytes (server setting max_session_tool_bytes). Its state is kept; seed a new session to go on"
    )


def answer_too_large(size: int, limit: int) -> str:
    return f"the tool's answer is {size} bytes; the limit is {limit} bytes (server setting max_tool_answer_bytes)"


async def _answer(send: Send, status: int, detail: str, close: bool = True) -> None:
    """The answer, closing the connection when the request's body may be left unread (it would otherwise be read
    as the next request)."""
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class SessionBudgetMiddleware:
    """Plain ASGI, inside ``NgymMiddleware`` (it reads the request's session from the scope)."""

    def __init__(self, app: ASGIApp, max_tool_call_bytes: int, max_session_bytes: int, max_answer_bytes: int) -> None:
        self.app = app
        self.max_call = max_tool_call_bytes
        self.max_session = max_session_bytes
        self.max_answer = max_answer_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] in STANDARD_POST_PATHS:
            await self.app(scope, receive, send)
            return
        session: RequestSession | None = scope.get(SCOPE_KEY)
        meta = session.record.meta if session is not None and session.record is not None else None
        declared = _declared_length(scope)
        if declared is not None:
            if declared > self.max_call:
                await _answer(send, 413, call_too_large(declared, self.max_call))
                return
            if meta is not None:
                used = int(meta.get(META_KEY, 0))
                if used + declared > self.max_session:
                    await _answer(send, 413, session_over_budget(used, declared, self.max_session))
                    return
                meta[META_KEY] = used + declared
        counted = 0
        started = replaced = False
        #: an answer without a declared length: its start held until its first chunk, and the bytes sent so far
        held: Message | None = None
        counting = False
        streamed = 0

        async def counting_receive() -> Message:
            nonlocal counted
            message = await receive()
            if declared is None and message["type"] == "http.request":
                counted += len(message.get("body", b""))
                if counted > self.max_call:
                    raise BudgetExceeded(call_too_large(counted, self.max_call))
                if meta is not None:
                    used = int(meta.get(META_KEY, 0))
                    size = len(message.get("body", b""))
                    if used + size > self.max_session:
                        raise BudgetExceeded(session_over_budget(used, size, self.max_session))
                    meta[META_KEY] = used + size
            return message

        async def capped_send(message: Message) -> None:
            nonlocal started, replaced, held, counting, streamed
            if replaced:
                return
            if message["type"] == "http.response.start":
                length = _content_length(message)
                if length is not None and length > self.max_answer:
                    replaced = started = True
                    await _answer(send, 413, answer_too_large(length, self.max_answer), close=False)
                    return
                started = True
                if length is None:  # streamed: counted chunk by chunk below
                    counting = True
                    if not _is_event_stream(message):  # an event stream's client waits for its headers (MCP)
                        held = message
                        return
            elif message["type"] == "http.response.body" and counting:
                streamed += len(message.get("body", b""))
                if streamed > self.max_answer:
                    if held is not None:  # nothing sent yet: the whole answer is replaced
                        held, replaced = None, True
                        await _answer(send, 413, answer_too_large(streamed, self.max_answer), close=False)
                        return
                    replaced = True
                    log.warning(
                        "%s %s: a streamed answer passed %d bytes (server setting max_tool_answer_bytes) after its "
                        "status was sent; the stream was cut and the connection closed",
                        scope["method"],
                        scope["path"],
                        self.max_answer,
                    )
                    raise _AnswerCut
                if held is not None:
                    start, held = held, None
                    await send(start)
            await send(message)

        try:
            await self.app(scope, counting_receive if declared is None else receive, capped_send)
        except BudgetExceeded as exc:  # raised where no exception handler answered
            if not started:
                await _answer(send, exc.status_code, str(exc.detail))
        except Exception as exc:  # noqa: BLE001 - the cut may come back wrapped (a task group's exception group)
            if not _is_cut(exc):
                raise
        if held is not None:  # the app ended its answer without a body message
            await send(held)


def _content_length(message: Message) -> int | None:
    for name, value in message.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _is_event_stream(message: Message) -> bool:
    return any(
        name.lower() == b"content-type" and value.startswith(b"text/event-stream")
        for name, value in message.get("headers", ())
    )


def _is_cut(exc: BaseException) -> bool:
    if isinstance(exc, _AnswerCut):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cut(inner) for inner in exc.exceptions)
    return _is_cut(exc.__cause__) if exc.__cause__ is not None else False


def session_bytes_report(records: list[Any] | None, limit: int) -> dict[str, Any] | None:
    """``/health``'s ``session_bytes``: the tool-call bytes the live sessions hold (None when the store cannot
    list its records here)."""
    if records is None:
        return None
    sizes = [int(record.meta.get(META_KEY, 0)) for record in records]
    return {"sessions": len(sizes), "total": sum(sizes), "largest": max(sizes, default=0), "limit": limit}
