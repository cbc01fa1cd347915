"""An in-memory stand-in for the asyncio transport uvicorn's HTTP protocols write to.

Drives a protocol class (``protocol.connection_made(transport)``, then ``protocol.data_received(raw)``) without a
socket or a kernel: to test or time what a server does with raw HTTP bytes (``ngym.server.pipeline.http_protocol``'s
tests, ``bench/bench_inprocess.py``)::

    transport = MemoryTransport()
    protocol.connection_made(transport)
    protocol.data_received(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    bytes(transport.written)                  # the response uvicorn wrote
"""

from __future__ import annotations

from typing import Any


class _Socket:
    def getpeername(self) -> tuple[str, int]:
        return ("127.0.0.1", 50000)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 8000)


class MemoryTransport:
    """Just enough of an asyncio transport for uvicorn's protocol: collects what is written in ``written``."""

    def __init__(self, can_write_eof: bool = False) -> None:
        self.written = bytearray()
        self.closed = False
        self.eof = False  #: the server ended its side (``write_eof``)
        self._can_write_eof = can_write_eof

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return _Socket() if name == "socket" else default

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return self._can_write_eof

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
