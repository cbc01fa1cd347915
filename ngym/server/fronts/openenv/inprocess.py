"""POST to the server's own app in process: one ASGI call, no client library, no socket.

The request goes through the whole app (middleware, session binding, validation) as an agent's would; only the
network and the HTTP client are skipped. An HTTP client in between (``httpx.ASGITransport``) costs several times
the route itself on a small tool (``bench/bench_openenv_front.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pydantic_core


@dataclass
class Answer:
    """The status, ``set-cookie`` values and body of one in-process response."""

    status: int = 500
    set_cookies: list[str] = field(default_factory=list)
    body: bytes = b""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return pydantic_core.from_json(self.body) if self.body else None


class InProcessClient:
    """Calls ``app`` (an ASGI app) directly with an HTTP scope."""

    def __init__(self, app: Any, host: str = "ngym-openenv.internal") -> None:
        self.app = app
        self.host = host.encode()

    async def post(self, path: str, body: Any, cookie: str | None = None) -> Answer:
        payload = pydantic_core.to_json(body)  # a C serialiser: rows with their tools are kilobytes
        headers = [
            (b"host", self.host),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        if cookie:
            headers.append((b"cookie", cookie.encode()))
        scope = {
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
            "server": ("ngym-openenv.internal", 80),
            "state": {},
        }
        sent = False
        answer = Answer()
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer.status = int(message["status"])
                headers = message.get("headers", ())
                answer.set_cookies = [v.decode("latin-1") for k, v in headers if k.lower() == b"set-cookie"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # the app's own 500 handling answered already when it could
            if not chunks and answer.status == 500:
                chunks.append(json.dumps({"detail": f"{type(exc).__name__}: {exc}"}).encode())
        answer.body = b"".join(chunks)
        return answer
