"""The HTTP floor for bench_fronts.py: uvicorn as ``ngym run`` configures it, serving a bare ASGI app that answers
every request with the same ready-made bytes (no framework, no routing, no body read).

What a request costs here is what any HTTP request costs the server whatever it does: parsing, the ASGI call,
the socket writes. ``python bench/bare_http.py PORT [ready]``: with ``ready``, every request is answered from the
HTTP parser's callbacks instead (``ngym.server.pipeline.ready_answers``: no ASGI cycle, no task),
as ngym answers the ORS front's requests that run no environment code.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import uvicorn

from ngym.server.pipeline import http_protocol
from ngym.server.pipeline.ready_answers import ready_answers

BODY = b'{"status":"ok"}'
HEADERS = [(b"content-length", b"%d" % len(BODY)), (b"content-type", b"application/json")]
START = {"type": "http.response.start", "status": 200, "headers": HEADERS}
END = {"type": "http.response.body", "body": BODY}
#: the same answer as ready bytes (after the status line and uvicorn's default headers)
READY = b"".join(b"%s: %s\r\n" % pair for pair in HEADERS) + b"\r\n" + BODY


class App:
    """The bare ASGI app (with a ``state``, where ``ReadyAnswers`` are looked for)."""

    def __init__(self) -> None:
        self.state = SimpleNamespace()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send(START)
            await send(END)


def _ready(method: bytes, url: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    return READY


def main() -> None:
    app = App()
    if sys.argv[2:] == ["ready"]:
        ready_answers(app).answer = _ready
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        access_log=False,
        lifespan="off",
        http=http_protocol.protocol_class(),  # as ngym.server.hosting.host.uvicorn_config
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
