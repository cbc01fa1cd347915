"""A backend for bench_haproxy_floor.py: answers every HTTP/1.1 request with the same ready-made bytes.

No framework, no routing, no JSON: it reads a request's head and its ``Content-Length`` body, then writes one
prepared answer (a 200 carrying a session cookie whose id routes to this backend's slot, as a worker's answer
would). ``--burn-us N`` spends N microseconds of CPU per request before answering, so the proxy in front of it
sees the pace of a real worker (the counter's worker takes about 110 us per request) rather than a backend that
answers at once. What it costs per request with ``--burn-us 0`` is the least any backend process could cost.

    python bench/ready_backend.py (--unix PATH | --abns NAME | --port PORT) [--slot I/N] [--burn-us N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import time
from typing import cast

from ngym.server.sessions.routing import slot_of

BODY = b'{"status":"ok"}'


def cookie_id(slot: int, count: int) -> str:
    """A session id HAProxy's ``crc32,mod(count)`` sends to ``slot`` (drawn as ngym's seeds draw theirs)."""
    while True:
        candidate = secrets.token_hex(16)
        if slot_of(candidate, count) == slot:
            return candidate


def answer(slot: int, count: int, cookie_name: str = "ngym_session") -> bytes:
    """The one answer this backend sends to every request."""
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"set-cookie: %s=%s.signature; Path=/; HttpOnly; SameSite=lax\r\n\r\n%s"
    ) % (len(BODY), cookie_name.encode(), cookie_id(slot, count).encode(), BODY)


def burn(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class Ready(asyncio.Protocol):
    """One connection: requests in, the prepared answer out, in order (HTTP/1.1 keep-alive)."""

    def __init__(self, reply: bytes, burn_s: float) -> None:
        self.reply, self.burn_s = reply, burn_s
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's subclasses

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        out = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buffer[:end].lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                length = int(head[at + 17 :].split(b"\r\n", 1)[0])
            if len(self.buffer) < end + 4 + length:
                break
            self.buffer = self.buffer[end + 4 + length :]
            if self.burn_s:
                burn(self.burn_s)
            out.append(self.reply)
            if b"\r\nconnection: close" in head:
                break
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


def listening(args: argparse.Namespace) -> socket.socket:
    if args.port:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", args.port))
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # HAProxy's abns@ names fill the whole sun_path (NUL-padded): bind the same bytes
        sock.bind(b"\0" + args.abns.encode().ljust(107, b"\0") if args.abns else args.unix)
    sock.listen(1024)
    return sock


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--unix", default="")
    parser.add_argument("--abns", default="", help="an abstract unix socket name (Linux)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--slot", default="0/1")
    parser.add_argument("--burn-us", type=float, default=0.0)
    args = parser.parse_args()
    slot, count = (int(x) for x in args.slot.split("/"))
    reply = answer(slot, count)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # the asyncio loop answers the same bytes, a little slower
        pass

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Ready(reply, args.burn_us / 1e6), sock=listening(args))
        print("ready", flush=True)
        await server.serve_forever()

    os.environ.pop("PYTHONASYNCIODEBUG", None)
    asyncio.run(serve())


if __name__ == "__main__":
    main()
