"""uvicorn's WebSocket protocol (websockets' sans-I/O one), with a direct path for an app that reads and writes
whole text messages itself (OpenEnv's ``/openenv/ws``, a request/answer exchange of JSON messages).

uvicorn hands each message to the application as an ASGI event through a queue, and stops reading the socket
until the application takes it (``pause_reading`` per message, ``resume_reading`` when taken: two changes of the
event loop's interest in the socket per message); the application's answer goes back as an ASGI event through
every ``send`` wrapper of the app's middleware and routes (Starlette's exception handling wraps it at each level),
then through websockets' frame writer; and every read goes through websockets' frame parser. Here:

- a socket read that is exactly one whole text (or binary) message, the usual case, is taken as that message
  without websockets' frame parser (a generator per frame and per field), when that parser waits for a new frame
  with nothing buffered and the connection is open and uncompressed; any other read (a ping, a close, a fragment,
  part of a frame or several, a size over the limit) is websockets' to parse, as before;
- the socket is not paused for a message that an application already waiting for one takes at once (the usual
  case of a request/answer exchange); a message nobody is waiting for pauses reading as uvicorn does, so a client
  still cannot make the server queue more than the messages of one read;
- the application may take the connection's ``DirectSocket`` from its scope (``direct_socket(scope)``; present
  only when this protocol serves the connection) and, once the handshake is done, read text messages with
  ``receive_text()`` and write one with ``send_text(payload_bytes)``: the same queue of ASGI events and the same
  frames on the wire, without an ASGI event dict, a ``send`` wrapper or a ``str`` round trip per message. A frame
  of an uncompressed connection is written with its two-to-ten-byte header made here (RFC 6455 §5.2: a server's
  frames are unmasked); a connection that negotiated permessage-deflate goes through websockets' own writer.

Everything else (handshake, ping/pong, close, size limits, invalid UTF-8) is uvicorn's and websockets' own.
``protocol_class()`` gives this class for the uvicorn releases it was checked against (``UVICORN_RELEASES``: it
relies on their sans-I/O protocol's internals), else uvicorn's default; the direct read of a whole frame also needs
websockets' parser as releases 15-17 have it (``FRAMES_READ_DIRECTLY``), else every read goes to that parser.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

#: Where the direct path of a connection is found in its ASGI scope (``scope["extensions"]``).
DIRECT_EXTENSION = "ngym.websocket.direct"


class SocketGone(ConnectionError):
    """The client went away, or the connection is closing: nothing more can be sent or received on it."""


def direct_socket(scope: Any) -> DirectSocket | None:
    """The connection's direct path, when this module's protocol serves it (None otherwise, e.g. under a test
    client or another WebSocket implementation: the application uses ASGI events then)."""
    extensions = scope.get("extensions") or {}
    found = extensions.get(DIRECT_EXTENSION)
    return found if isinstance(found, DirectSocket) else None


class DirectSocket:
    """An accepted WebSocket's text messages, read and written without ASGI events (see the module docstring)."""

    __slots__ = ("_protocol",)

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol

    async def receive_text(self) -> str:
        """The next message as text (a binary message decoded as UTF-8, invalid bytes replaced); ``SocketGone``
        when the client closed or went away."""
        protocol = self._protocol
        queue = protocol.queue
        if queue.empty():  # uvicorn's ``receive``, less a call: wait for the next event, reading resumed
            protocol.ngym_waiting = True
            try:
                message = await queue.get()
            finally:
                protocol.ngym_waiting = False
        else:
            message = queue.get_nowait()
        if protocol.read_paused and queue.empty():
            protocol.read_paused = False
            protocol.transport.resume_reading()
        text = message.get("text")
        if text is not None:
            return str(text)
        data = message.get("bytes")
        if data is not None:
            return bytes(data).decode("utf-8", "replace")
        raise SocketGone(f"websocket closed ({message.get('code', 1005)})")

    async def send_text(self, payload: bytes) -> None:
        """Write one text message: ``payload`` is its UTF-8 bytes. ``SocketGone`` when the connection is closed
        or closing."""
        protocol = self._protocol
        if not protocol.writable.is_set():  # the transport's buffer is full: wait for it to drain
            await protocol.writable.wait()
        if protocol.disconnected or protocol.close_sent or not protocol.handshake_complete:
            raise SocketGone("websocket closed")
        conn = protocol.conn
        if conn.state is not _OPEN:
            raise SocketGone("websocket closing")
        if conn.extensions:  # permessage-deflate: websockets' writer compresses
            conn.send_text(payload)
            protocol.transport.write(b"".join(conn.data_to_send()))
            return
        protocol.transport.write(frame_header(len(payload)) + payload)


def frame_header(size: int) -> bytes:
    """The header of an unmasked, final text frame carrying ``size`` bytes (RFC 6455 §5.2)."""
    if size < 126:
        return bytes((0x81, size))
    if size < 1 << 16:
        return b"\x81\x7e" + size.to_bytes(2, "big")
    return b"\x81\x7f" + size.to_bytes(8, "big")


_OPEN: Any = None
_AT_EOF: Any = None
FRAMES_READ_DIRECTLY = False
WebSocketProtocol: type[asyncio.Protocol] | None = None
try:  # uvicorn >= 0.35 with websockets installed (uvicorn[standard]); otherwise uvicorn's default is used
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
    from websockets.protocol import Protocol, Side, State
    from websockets.streams import StreamReader

    try:
        from websockets.speedups import apply_mask as _apply_mask
    except ImportError:  # pragma: no cover
        from websockets.utils import apply_mask as _apply_mask
except ImportError:  # pragma: no cover
    WebSocketsSansIOProtocol = None  # type: ignore[assignment,misc]


def _waits_for_a_frame(parser: Any) -> bool:
    """Whether websockets' parser (a generator) waits at a frame boundary: its innermost generator is the reader's
    ``at_eof``, where the frame loop waits for the next frame's first byte."""
    inner = parser
    while True:
        delegate = getattr(inner, "gi_yieldfrom", None)
        if delegate is None:
            return getattr(inner, "gi_code", None) is _AT_EOF
        inner = delegate


def _frames_read_directly() -> bool:
    """Whether the installed websockets keeps what the direct read of a whole frame relies on (its parser waiting
    at a frame boundary in the reader's ``at_eof``, its size limits' and state's names, as in websockets 15-17);
    otherwise every read goes to websockets' own parser (messages are still written directly)."""
    try:
        probe: Any = Protocol(Side.SERVER, state=State.OPEN)
        _ = (probe.max_message_size, probe.max_fragment_size, probe.current_size, probe.extensions)
        return isinstance(probe.reader.buffer, bytearray) and _waits_for_a_frame(probe.parser)
    except Exception:  # any other shape: not read directly
        return False


#: what this module's protocol overrides of uvicorn's (a uvicorn without one of them: uvicorn's own protocol is used)
_OVERRIDDEN = ("data_received", "handle_connect", "send_receive_event_to_app", "receive")

#: the uvicorn releases whose sans-I/O protocol keeps what this one relies on (its message ``frames``, its
#: ``disconnected`` flag, ...; 0.52.4 to 0.54 checked): any other release serves WebSockets with uvicorn's own protocol
UVICORN_RELEASES = ((0, 52, 4), (0, 55, 0))


def _release(version: str) -> tuple[int, ...]:
    """``"0.54.0"`` as ``(0, 54, 0)`` (a part that is not a number ends it)."""
    parts: list[int] = []
    for part in version.split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _uvicorn_fits() -> bool:
    import uvicorn

    first, beyond = UVICORN_RELEASES
    return first <= _release(uvicorn.__version__) < beyond


if (
    WebSocketsSansIOProtocol is not None
    and all(hasattr(WebSocketsSansIOProtocol, n) for n in _OVERRIDDEN)
    and _uvicorn_fits()
):
    _OPEN = State.OPEN
    _AT_EOF = StreamReader.at_eof.__code__
    #: whether a read that is one whole frame is taken without websockets' parser (``_frames_read_directly``)
    FRAMES_READ_DIRECTLY = _frames_read_directly()  # noqa: F811

    class _WebSocketProtocol(WebSocketsSansIOProtocol):
        """uvicorn's sans-I/O WebSocket protocol with a direct path (see the module docstring)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.ngym_waiting = False  # the application is waiting in ``receive`` for the next event

        def data_received(self, data: bytes) -> None:
            if not self._one_whole_message(data):
                super().data_received(data)

        def _one_whole_message(self, data: bytes) -> bool:
            """Take ``data`` as a message, without websockets' frame parser, when it is exactly one whole, final,
            masked text or binary frame of an open, uncompressed connection whose parser waits for a new frame
            with nothing buffered: the case where that parser would yield that one frame and change no state of
            its own. Anything else (a control frame, a fragment, part of a frame or more than one, a size over the
            limit, reserved bits set) goes to websockets (False)."""
            size = len(data)
            if size < 6 or not FRAMES_READ_DIRECTLY or not self.handshake_complete or self.close_sent:
                return False
            first, second = data[0], data[1]
            if (first != 0x81 and first != 0x82) or second < 0x80:  # FIN + text/binary, no RSV bits; masked
                return False
            length, start = second & 0x7F, 2
            if length == 126:
                length, start = int.from_bytes(data[2:4], "big"), 4
            elif length == 127:
                length, start = int.from_bytes(data[2:10], "big"), 10
            if size != start + 4 + length:
                return False
            conn = self.conn
            limit, fragment_limit = conn.max_message_size, conn.max_fragment_size
            if (limit is not None and length > limit) or (fragment_limit is not None and length > fragment_limit):
                return False
            if conn.state is not _OPEN or conn.extensions or conn.current_size is not None or conn.reader.buffer:
                return False
            if not _waits_for_a_frame(conn.parser):
                return False
            self.curr_msg_data_type = "text" if first == 0x81 else "bytes"
            self.frames = [_apply_mask(data[start + 4 :], data[start : start + 4])]
            self.send_receive_event_to_app()
            return True

        def handle_connect(self, event: Any) -> None:
            super().handle_connect(event)
            scope = getattr(self, "scope", None)
            if scope is not None:  # a handshake uvicorn goes on with: its application task starts after this
                scope["extensions"][DIRECT_EXTENSION] = DirectSocket(self)

        def send_receive_event_to_app(self) -> None:
            if self.ngym_waiting and not self.read_paused:
                # Taken at once by the application waiting for it: no reason to stop reading. uvicorn pauses
                # reading unless it is paused already, so it is marked paused for the call and unmarked after.
                self.read_paused = True
                try:
                    super().send_receive_event_to_app()
                finally:
                    self.read_paused = False
                self.ngym_waiting = False  # a second message of the same read is not taken at once: it pauses
                return
            super().send_receive_event_to_app()

        async def receive(self) -> Any:
            queue = self.queue
            if not queue.empty():
                return await super().receive()
            self.ngym_waiting = True
            try:
                return await super().receive()
            finally:
                self.ngym_waiting = False

    WebSocketProtocol = _WebSocketProtocol


def protocol_class() -> type[asyncio.Protocol] | str:
    """The WebSocket protocol for ``uvicorn.Config(ws=...)``: this module's when available, else ``"auto"``."""
    return WebSocketProtocol if WebSocketProtocol is not None else "auto"


__all__ = ["DIRECT_EXTENSION", "DirectSocket", "SocketGone", "direct_socket", "frame_header", "protocol_class"]
