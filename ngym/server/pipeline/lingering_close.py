"""The transport of one HTTP connection as uvicorn's request cycles see it (``ngym.server.pipeline.http_protocol``):
a response's head held for its body (one write per response), and a lingering close for an answer given before its
request's body arrived."""

from __future__ import annotations

import asyncio
from typing import Any

#: How long a connection answered before its request's body arrived keeps reading (and dropping) that body.
LINGER_SECONDS = 5.0
#: How many bytes of such a body it reads and drops at most before it closes anyway.
LINGER_BYTES = 64 * 1024 * 1024


class LingeringClose:
    """The connection's transport as uvicorn's request cycles see it: ``close()`` while the request's body is still
    arriving ends the server's side (the answer is complete), then lets the protocol drop what comes, and closes
    when the client ends its side, or after ``LINGER_SECONDS`` or ``LINGER_BYTES``. Everything else is the
    transport's own."""

    def __init__(self, transport: Any, protocol: Any) -> None:
        self._transport = transport
        self._protocol = protocol
        self._timer: asyncio.TimerHandle | None = None
        self._dropped = 0
        self._head: Any = None  # a response's status line and headers, held for its body

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    @property
    def raw(self) -> Any:
        """The transport this one wraps."""
        return self._transport

    def write(self, data: Any) -> None:
        """Write ``data``; a response's status line and headers (not an interim 1xx) are held and go out with the
        next write (its body), or at the end of this turn of the event loop if none comes in it (a stream whose
        first chunk is not ready): one system call per response instead of two."""
        head = self._head
        if head is not None:
            self._head = None
            self._transport.write(head + data)
        elif data[:9] == b"HTTP/1.1 " and data[9:10] != b"1" and not self._transport.is_closing():
            self._head = data if type(data) is bytes else bytes(data)  # joined with the body's bytes below
            self._protocol.loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def write_whole(self, data: bytes) -> None:
        """Write a whole response now (after a held head, if any)."""
        self.flush()
        self._transport.write(data)

    def flush(self) -> None:
        """Write a held response head now (dropped if the connection has closed meanwhile)."""
        head = self._head
        if head is not None:
            self._head = None
            if not self._transport.is_closing():
                self._transport.write(head)

    def _body_still_arriving(self) -> bool:
        owner = getattr(self._transport, "get_protocol", None)
        return (
            self._protocol.cycle is not None
            and self._protocol._body_pending()
            and (owner is None or owner() is self._protocol)  # not after a WebSocket upgrade
            and not self._transport.is_closing()
            and self._transport.can_write_eof()
        )

    def close(self) -> None:
        self.flush()
        if self._protocol._ngym_lingering:
            return
        if not self._body_still_arriving():
            self._transport.close()
            return
        self._protocol._ngym_lingering = True
        self._protocol._ngym_armed = False
        try:
            self._transport.write_eof()
            self._transport.resume_reading()
        except (OSError, RuntimeError):
            self._transport.close()
            return
        self._timer = self._protocol.loop.call_later(LINGER_SECONDS, self._transport.close)

    def is_closing(self) -> bool:
        return bool(self._protocol._ngym_lingering or self._transport.is_closing())

    def dropped(self, size: int) -> None:
        """``size`` more bytes of the unread body were dropped; past ``LINGER_BYTES`` the connection closes."""
        self._dropped += size
        if self._dropped > LINGER_BYTES:
            self._transport.close()

    def lost(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
