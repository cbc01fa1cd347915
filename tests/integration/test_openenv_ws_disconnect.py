"""A WebSocket client of the OpenEnv front that drops its connection while its answer is on the way is one closed
episode, never an "Exception in ASGI application" traceback in the server's log (closing a socket the client had
already dropped raised, three tracebacks for three dropped clients)."""

from __future__ import annotations

import json
import socket
import struct
import sys
from pathlib import Path

import httpx
from websockets.sync.client import connect

from ngym.child_server import free_port

from .conftest import start

VENV_BIN = Path(sys.executable).parent


def test_a_client_dropping_mid_answer_leaves_no_traceback() -> None:
    port = free_port()
    served = start([str(VENV_BIN / "ngym"), "run", "example_single_tool_call", "--port", str(port)], port, timeout=60)
    try:
        for _ in range(3):
            with connect(f"ws://127.0.0.1:{port}/openenv/ws", max_size=None) as client:
                client.send(json.dumps({"type": "reset", "data": {}}))
                client.recv(timeout=30)
                step = {"tool_name": "get_weather", "arguments": {"city": "x" * 200_000}}
                client.send(json.dumps({"type": "step", "data": step}))
                raw = client.socket
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                raw.close()  # gone before the answer (a reset, no close frame)
        assert httpx.get(f"{served.url}/health", timeout=30).status_code == 200
    finally:
        code, out = served.stop()
    assert "Exception in ASGI application" not in out and "Traceback" not in out, out[-3000:]
