"""Calling the environment's own app in process: one ASGI request, no socket, the whole middleware stack.

This is how the front reaches the session manager and the author's methods: ``POST /seed_session``, a tool
route, ``/verify`` and ``/close_session`` run exactly as an agent's HTTP calls would (request limits, the session
cookie, validation, lost-session masking, errors), so nothing about sessions or rewards is decided here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Message


@dataclass
class Answer:
    status: int
    body: bytes
    set_cookie: bytes | None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


async def post(app: ASGIApp, path: str, body: bytes, cookie: bytes | None = None) -> Answer:
    """``POST path`` with a JSON ``body`` (and the session ``cookie``) to ``app``; its status, body and cookie."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 0),
        "server": ("ngym-ors.internal", 80),
        "state": {},
    }
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the caller never goes away: a streaming route runs to its end
        raise AssertionError("unreachable")

    status = 500
    chunks: list[bytes] = []
    set_cookie: bytes | None = None

    async def send(message: Message) -> None:
        nonlocal status, set_cookie
        if message["type"] == "http.response.start":
            status = message["status"]
            for name, value in message.get("headers", ()):
                if name.lower() == b"set-cookie":
                    set_cookie = value
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return Answer(status, b"".join(chunks), set_cookie)
