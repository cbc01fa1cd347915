"""An in-memory stand-in for the asyncio transport uvicorn's HTTP protocols write to.

Drives a protocol class (``protocol.connection_made(transport)``, then ``protocol.data_received(raw)``) without a
socket or a kernel: the unit tests of ``ngym.server.pipeline.http_protocol`` and ``bench/bench_inprocess.py`` use it.
"""

from typing import Any


class _Socket:
    def getpeername(self) -> tuple[str, int]:
        return ("127.0.0.1", 50000)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 8000)


class MemoryTransport:
    """Just enough of an asyncio transport for uvicorn's protocol: collects what is written in ``written``."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return _Socket() if name == "socket" else default

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
