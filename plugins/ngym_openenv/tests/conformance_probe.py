"""The same OpenEnv error cases sent to one server; run with an interpreter that has httpx and websockets.

``python conformance_probe.py URL ACTION_JSON``: over HTTP (``/step`` before ``/reset``, unknown action fields,
bodies that are not JSON, ``/state`` before reset, MCP ``tools/list`` and ``tools/call`` of an unknown tool, an
unknown JSON-RPC method) and over the ``/ws`` session (an unknown message type, a step before reset, a frame that
is not JSON, unknown action fields, ``state`` before reset, a step after ``close``). ``ACTION_JSON`` is a valid
action of the environment. Prints one JSON list: ``{"label", "status"}`` and the parts of the answer a client
reads (an HTTP error's ``detail`` kind, a WebSocket error's ``code``, a JSON-RPC error's ``code``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
import websockets


def _shape(answer: httpx.Response) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {"status": answer.status_code, "json": False}
    shown: dict[str, Any] = {"status": answer.status_code}
    if isinstance(body, dict) and "detail" in body:
        detail = body["detail"]
        shown["detail"] = [e.get("type") for e in detail] if isinstance(detail, list) else type(detail).__name__
    if isinstance(body, dict) and "error" in body and isinstance(body["error"], dict):
        shown["rpc_error"] = body["error"].get("code")
    if isinstance(body, dict) and "result" in body:
        result = body["result"]
        shown["rpc_result"] = sorted(result) if isinstance(result, dict) else type(result).__name__
        if isinstance(result, dict) and "isError" in result:
            shown["is_error"] = result["isError"]
    return shown


def http_cases(url: str, action: dict[str, Any]) -> list[dict[str, Any]]:
    seen = []
    with httpx.Client(base_url=url, timeout=60) as http:

        def send(label: str, method: str, path: str, **kwargs: Any) -> None:
            seen.append({"label": label, **_shape(http.request(method, path, **kwargs))})

        send("health", "GET", "/health")
        send("step before reset", "POST", "/step", json={"action": action})
        send("step unknown action field", "POST", "/step", json={"action": {**action, "bogus_field": 1}})
        send("step action missing", "POST", "/step", json={})
        send("step not JSON", "POST", "/step", content=b"{nope", headers={"content-type": "application/json"})
        send("reset not JSON", "POST", "/reset", content=b"{nope", headers={"content-type": "application/json"})
        send("state before reset", "GET", "/state")
        send("mcp tools/list", "POST", "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}
        send("mcp tools/call unknown tool", "POST", "/mcp", json=call)
        send("mcp unknown method", "POST", "/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "no/such"})
        send("mcp not JSON", "POST", "/mcp", content=b"{nope", headers={"content-type": "application/json"})
    return seen


async def ws_cases(url: str, action: dict[str, Any]) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    ws_url = url.replace("http://", "ws://", 1) + "/ws"

    async def exchange(socket: Any, label: str, frame: str) -> None:
        await socket.send(frame)
        answer = json.loads(await asyncio.wait_for(socket.recv(), 60))
        data = answer.get("data") or {}
        seen.append(
            {
                "label": label,
                "type": answer.get("type"),
                "code": data.get("code") if answer.get("type") == "error" else None,
            }
        )

    async with websockets.connect(ws_url, compression=None) as socket:
        await exchange(socket, "ws unknown type", json.dumps({"type": "no_such_type"}))
        await exchange(socket, "ws not JSON", "{nope")
        await exchange(socket, "ws state before reset", json.dumps({"type": "state"}))
        await exchange(socket, "ws step before reset", json.dumps({"type": "step", "data": action}))
        await exchange(socket, "ws reset", json.dumps({"type": "reset", "data": {}}))
        await exchange(
            socket, "ws step unknown action field", json.dumps({"type": "step", "data": {**action, "bogus_field": 1}})
        )
        await exchange(socket, "ws step", json.dumps({"type": "step", "data": action}))
        await socket.send(json.dumps({"type": "close"}))
        try:
            await exchange(socket, "ws step after close", json.dumps({"type": "step", "data": action}))
        except (websockets.ConnectionClosed, TimeoutError):  # the server ended the session and its socket
            seen.append({"label": "ws step after close", "closed": True})
    return seen


if __name__ == "__main__":
    base, action_json = sys.argv[1].rstrip("/"), json.loads(sys.argv[2])
    result = http_cases(base, action_json) + asyncio.run(ws_cases(base, action_json))
    print("\n" + json.dumps(result))
