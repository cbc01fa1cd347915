"""The HTTP floor for bench_fronts.py: uvicorn as ``ngym run`` configures it, serving a bare ASGI app that answers
every request with the same ready-made bytes (no framework, no routing, no body read).

What a request costs here is what any HTTP request costs the server whatever it does: parsing, the ASGI call,
the socket writes. ``python bench/bare_http.py PORT``.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from ngym.server.pipeline import http_protocol

BODY = b'{"status":"ok"}'
START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-length", b"%d" % len(BODY)), (b"content-type", b"application/json")],
}
END = {"type": "http.response.body", "body": BODY}


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await send(START)
        await send(END)


def main() -> None:
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
