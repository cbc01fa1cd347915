"""RequestLimitsMiddleware on its own (plain ASGI): the body deadline, the size cap, and what it leaves alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ngym.server.pipeline.request_limits import BodyTimeout, BodyTooLarge, ClientGone, RequestLimitsMiddleware

SCOPE = {"type": "http", "method": "POST", "path": "/x", "headers": []}


async def read_body_app(scope: Any, receive: Any, send: Any) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"%d" % len(body)})


def client(chunks: list[bytes], pause: float = 0.0, then: str = "end") -> Any:
    """A receive callable: the chunks (a pause before each), then the body ends ("end"), or more is announced
    and never comes ("stall"), or the client leaves ("disconnect")."""
    queue = list(chunks)

    async def receive() -> dict[str, Any]:
        if queue:
            await asyncio.sleep(pause)
            chunk = queue.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(queue) or then != "end"}
        if then in ("disconnect", "end"):
            return {"type": "http.disconnect"}
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    return receive


async def run(app: Any, receive: Any, **limits: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    middleware = RequestLimitsMiddleware(app, **{"max_body_bytes": 1000, "body_timeout_seconds": 5, **limits})
    await asyncio.wait_for(middleware(dict(SCOPE), receive, send), timeout=10)
    return sent


async def test_a_body_within_limits_passes_untouched() -> None:
    sent = await run(read_body_app, client([b"a" * 400, b"b" * 400]))
    assert sent[0]["status"] == 200 and sent[1]["body"] == b"800"


async def test_a_body_that_stops_arriving_is_408() -> None:
    sent = await run(read_body_app, client([b"a" * 10], then="stall"), body_timeout_seconds=0.2)
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]


async def test_the_deadline_covers_the_whole_body_not_each_chunk() -> None:
    trickle = client([b"a"] * 50, pause=0.02)  # each chunk in time, the whole body not
    sent = await run(read_body_app, trickle, body_timeout_seconds=0.3)
    assert sent[0]["status"] == 408


async def test_streamed_bytes_past_the_cap_are_413() -> None:
    sent = await run(read_body_app, client([b"a" * 600, b"b" * 600, b"c" * 600]))
    assert sent[0]["status"] == 413


async def test_a_declared_length_past_the_cap_is_413_without_reading() -> None:
    async def never_read(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app must not run")

    scope = {**SCOPE, "headers": [(b"content-length", b"5000")]}
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await RequestLimitsMiddleware(never_read, 1000, 5)(scope, client([]), send)
    assert sent[0]["status"] == 413


async def test_a_disconnect_mid_body_is_one_info_line_and_no_answer(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="ngym.server")
    sent = await run(read_body_app, client([b"a" * 10], then="disconnect"))
    assert sent == []
    assert [r.getMessage() for r in caplog.records] == ["POST /x: client disconnected after 10 body bytes"]
    assert caplog.records[0].exc_info is None


async def test_waiting_for_the_disconnect_after_the_body_has_no_deadline() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()  # the whole body
        await asyncio.sleep(0.3)  # past the deadline: the body is in, so nothing happens
        assert (await receive())["type"] == "http.disconnect"
        await send({"type": "http.response.start", "status": 204, "headers": []})

    sent = await run(app, client([b"{}"]), body_timeout_seconds=0.1)
    assert sent[0]["status"] == 204


async def test_an_outside_cancellation_is_not_turned_into_a_408() -> None:
    middleware = RequestLimitsMiddleware(read_body_app, 1000, 0.2)

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError("nothing is sent")

    task = asyncio.ensure_future(middleware(dict(SCOPE), client([b"a"], then="stall"), send))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_the_errors_are_http_exceptions_fastapi_passes_on() -> None:
    from starlette.exceptions import HTTPException

    assert all(issubclass(cls, HTTPException) for cls in (BodyTimeout, BodyTooLarge, ClientGone))
