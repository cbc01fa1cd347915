"""ngym's WebSocket protocol (``ngym.server.pipeline.websocket_protocol``) under real uvicorn, against websockets'
client and raw frames: messages of every header size both ways, fragments, pings, several frames in one read,
invalid UTF-8, a size over the limit and permessage-deflate all behave as uvicorn's own protocol has them behave.
The application echoes each message through the connection's direct path (``DirectSocket``); the last test runs
OpenEnv's front under ``ngym run``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.sync.client import connect as sync_connect

from ngym.child_server import LOOPBACK, free_port
from ngym.server.pipeline.websocket_protocol import SocketGone, direct_socket, frame_header, protocol_class

from .conftest import start

VENV_BIN = Path(sys.executable).parent

#: Header sizes: 7-bit lengths up to 125, 16-bit from 126 to 65,535, 64-bit from 65,536.
SIZES = [0, 1, 125, 126, 127, 65_535, 65_536, 300_000]


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    direct = direct_socket(scope)
    if direct is None:  # a uvicorn this protocol does not take over (``UVICORN_RELEASES``): its own, as the front does
        assert protocol_class() == "auto"
        while (message := await receive())["type"] == "websocket.receive":
            text = message.get("text")
            text = text if text is not None else message["bytes"].decode("utf-8", "replace")
            await send({"type": "websocket.send", "text": text})
        return
    with contextlib.suppress(SocketGone):
        while True:
            text = await direct.receive_text()
            await direct.send_text(text.encode())


@contextlib.asynccontextmanager
async def _served(**options: Any) -> AsyncIterator[str]:
    port = free_port()
    options = {"ws_per_message_deflate": False, **options}  # as ngym serves by default (uvicorn's default: on)
    config = uvicorn.Config(_echo, host=LOOPBACK, port=port, log_level="warning", ws=protocol_class(), **options)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.05)
        assert server.started
        yield f"ws://{LOOPBACK}:{port}/"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


def test_frame_headers_follow_rfc_6455() -> None:
    assert frame_header(0) == b"\x81\x00"
    assert frame_header(125) == b"\x81\x7d"
    assert frame_header(126) == b"\x81\x7e\x00\x7e"
    assert frame_header(65_535) == b"\x81\x7e\xff\xff"
    assert frame_header(65_536) == b"\x81\x7f" + (65_536).to_bytes(8, "big")


async def test_messages_of_every_header_size_both_ways() -> None:
    async with _served() as url, connect(url, max_size=None) as client:
        for size in SIZES:
            text = ("é" * (size // 2)) + ("x" * (size % 2))  # two-byte characters: bytes and characters differ
            await client.send(text)
            assert await client.recv() == text
        await client.send(b"\x00binary")  # a binary message reaches the application decoded
        assert await client.recv() == "\x00binary"


async def test_fragments_pings_and_frames_sharing_a_read() -> None:
    async with _served() as url, connect(url, max_size=None) as client:
        await client.send(["frag", "mented", " message"])  # three frames: websockets' parser reassembles them
        assert await client.recv() == "fragmented message"
        await asyncio.wait_for(await client.ping(b"ping"), 10)
        await client.send("after the ping")
        assert await client.recv() == "after the ping"
        transport: Any = client.transport
        two = [Frame(Opcode.TEXT, text.encode()).serialize(mask=True, extensions=[]) for text in ("one", "two")]
        transport.write(b"".join(two))  # two whole frames in one write
        assert [await client.recv(), await client.recv()] == ["one", "two"]
        head = Frame(Opcode.TEXT, b"split across reads").serialize(mask=True, extensions=[])
        transport.write(head[:5])
        await asyncio.sleep(0.05)  # the server reads the first part alone
        transport.write(head[5:])
        assert await client.recv() == "split across reads"
        await client.send("whole again")  # websockets' parser waits for a new frame again: taken whole
        assert await client.recv() == "whole again"


async def test_invalid_utf8_closes_with_1007() -> None:
    async with _served() as url, connect(url) as client:
        transport: Any = client.transport
        transport.write(Frame(Opcode.TEXT, b"\xff\xfe").serialize(mask=True, extensions=[]))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(client.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007


async def test_a_message_over_the_size_limit_closes_with_1009() -> None:
    async with _served(ws_max_size=1000) as url, connect(url) as client:
        await client.send("x" * 1000)
        assert await client.recv() == "x" * 1000
        await client.send("x" * 1001)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(client.recv(), 10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_permessage_deflate_when_the_server_accepts_it() -> None:
    async with _served(ws_per_message_deflate=True) as url, connect(url, max_size=None) as client:
        assert client.response is not None
        assert "permessage-deflate" in (client.response.headers.get("Sec-WebSocket-Extensions") or "")
        for size in (10, 70_000):
            text = os.urandom(size // 2).hex()
            await client.send(text)
            assert await client.recv() == text


async def test_declined_compression_leaves_frames_plain() -> None:
    async with _served() as url, connect(url) as client:  # websockets' client offers permessage-deflate
        assert client.response is not None
        assert client.response.headers.get("Sec-WebSocket-Extensions") is None
        await client.send("plain")
        assert await client.recv() == "plain"


def _front_exchange(url: str) -> list[dict[str, Any]]:
    """A reset sent as a binary message, then a step and a final message as text, on ``ngym run``'s OpenEnv
    WebSocket; the answers."""
    with sync_connect(url, max_size=None) as client:
        client.send(json.dumps({"type": "reset", "data": {"task_index": 0}}).encode())  # a binary frame
        answers = [json.loads(client.recv(timeout=30))]
        for step in ({"tool_name": "get_weather", "arguments": {"city": "Paris"}}, {"message": "sunny"}):
            client.send(json.dumps({"type": "step", "data": step}))
            answers.append(json.loads(client.recv(timeout=30)))
    return answers


def test_the_openenv_front_reads_a_binary_message_as_its_text() -> None:
    """OpenEnv's clients send text; a binary message was a KeyError in the server log and a dropped connection."""
    port = free_port()
    served = start([str(VENV_BIN / "ngym"), "run", "example_single_tool_call", "--port", str(port)], port, timeout=60)
    try:
        reset, called, final = _front_exchange(f"ws://{LOOPBACK}:{port}/openenv/ws")
        assert reset["type"] == "observation" and reset["data"]["observation"]["task_index"] == 0
        assert called["type"] == "observation" and called["data"]["observation"]["error"] is None
        assert final["data"]["done"] is True and isinstance(final["data"]["reward"], float)
        assert httpx.get(f"{served.url}/health", timeout=30).json()["live_sessions"] == 0
    finally:
        code, out = served.stop()
    assert "Traceback" not in out, out[-3000:]
