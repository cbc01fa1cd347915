"""Frames between the server, the forkserver and the workers: a 4-byte big-endian length, then UTF-8 JSON.

Blocking helpers are used by the forkserver and the workers (single-threaded, no asyncio); the async ones by the
pool in the server. File descriptors travel with a frame as SCM_RIGHTS ancillary data (`send_frame(..., fds=)`).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from typing import Any

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024


class ProtocolError(Exception):
    """The peer sent something that is not a frame, or went away."""


class ConnectionClosed(ProtocolError):
    """The peer went away (closed its end, or died)."""


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> dict[str, Any]:
    message = json.loads(body.decode("utf-8", "surrogatepass"))
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a JSON object")
    return message


def send_frame(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = encode(message)
    if fds:
        sent = socket.send_fds(sock, [data], fds)
        data = data[sent:]
    if data:
        sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionClosed("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """Read one frame (and up to `max_fds` passed descriptors, which arrive with its first bytes)."""
    fds: list[int] = []
    if max_fds:
        head, fds, _flags, _addr = socket.recv_fds(sock, HEADER.size, max_fds)
        if not head:
            raise ConnectionClosed("connection closed")
        if len(head) < HEADER.size:
            head += _recv_exact(sock, HEADER.size - len(head))
    else:
        head = _recv_exact(sock, HEADER.size)
    (length,) = HEADER.unpack(head)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes is too large")
    return decode(_recv_exact(sock, length)), fds


async def read_frame(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> dict[str, Any]:
    """Read one frame of at most `limit` bytes (ProtocolError past it, before reading its body)."""
    try:
        head = await reader.readexactly(HEADER.size)
        (length,) = HEADER.unpack(head)
        if length > limit:
            raise ProtocolError(f"frame of {length} bytes is too large (at most {limit})")
        return decode(await reader.readexactly(length))
    except asyncio.IncompleteReadError as exc:
        raise ConnectionClosed("connection closed") from exc
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"frame is not JSON: {type(exc).__name__}") from exc


#: Characters a truncation marker may add past a cap.
MARKER_ROOM = 256
#: Longest error message a reply carries.
MAX_ERROR_CHARS = 4096


def reply_bound(max_output_chars: int) -> int:
    """The most bytes one well-formed reply of a cell can take: three capped texts and an error message, each
    character at most 6 bytes of JSON (a `\\uXXXX` escape), plus the keys."""
    return 6 * (3 * (max_output_chars + MARKER_ROOM) + MAX_ERROR_CHARS + MARKER_ROOM) + 1024


def _clean_text(value: str, limit: int) -> str:
    if len(value) > limit + MARKER_ROOM:
        value = value[:limit] + f"\n[... output truncated: {len(value) - limit} more characters not shown ...]"
    # A lone surrogate cannot be encoded as UTF-8 in the HTTP answer: show it escaped.
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def checked_reply(message: Any, max_output_chars: int) -> dict[str, Any]:
    """The reply of a cell with every field of the right type and within its cap; ProtocolError naming the first
    field that is not. Used wherever a reply is read from a process that ran user code."""
    if not isinstance(message, dict):
        raise ProtocolError("the reply is not a JSON object")
    success = message.get("success")
    if not isinstance(success, bool):
        raise ProtocolError("`success` is not true or false")
    reply: dict[str, Any] = {"success": success}
    for key, optional, limit in (
        ("stdout", False, max_output_chars),
        ("stderr", False, max_output_chars),
        ("result", True, max_output_chars),
        ("error_message", True, MAX_ERROR_CHARS),
    ):
        value = message.get(key)
        if value is None and optional:
            reply[key] = None
        elif isinstance(value, str):
            reply[key] = _clean_text(value, limit)
        else:
            raise ProtocolError(f"`{key}` is not a string")
    retire = message.get("retire", False)
    if not isinstance(retire, bool):
        raise ProtocolError("`retire` is not true or false")
    if retire:
        reply["retire"] = True
    return reply


async def write_frame(writer: asyncio.StreamWriter, message: dict[str, Any]) -> None:
    writer.write(encode(message))
    await writer.drain()
