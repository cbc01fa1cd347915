"""OpenEnv episodes held between HTTP requests over ``ngym run NAME --workers 2`` (HAProxy in front): every request
naming an episode reaches the worker that holds it, whichever way it names it: the ``/reset`` cookie, an MCP call's
``params.session_id``, a WebSocket attaching with ``?session_id=``."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from ngym.child_server import free_port
from tests.integration.conftest import VENV_BIN

HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")
STEPS = 3


def http_episode(url: str, i: int) -> dict[str, Any]:
    """One counter episode over ``/reset`` + ``/step`` (the episode cookie carried by the client)."""
    row = {"responses_create_params": {"input": "count"}, "initial_count": i, "expected_count": i + STEPS}
    with httpx.Client(base_url=f"{url}/openenv", timeout=60) as http:
        answers = [http.post("/reset", json={"row": row})]
        for _ in range(STEPS):
            action = {"tool_name": "increment_counter", "arguments": {"count": 1}}
            answers.append(http.post("/step", json={"action": action}))
        answers.append(http.post("/step", json={"action": {"message": "done"}}))
    last = answers[-1].json() if answers[-1].status_code == 200 else {}
    return {
        "statuses": [a.status_code for a in answers],
        "workers": {a.headers.get("x-ngym-worker") for a in answers},
        "reward": last.get("reward"),
    }


def rpc(http: httpx.Client, method: str, **params: Any) -> httpx.Response:
    return http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def mcp_episode(url: str, i: int) -> dict[str, Any]:
    """An episode opened by ``openenv/session/create``, stepped by ``tools/call`` over HTTP and over a WebSocket that
    attaches to it, then closed: what ``MCPToolClient`` does."""
    with httpx.Client(base_url=f"{url}/openenv", timeout=60) as http:
        created = rpc(http, "openenv/session/create")
        session_id = created.json()["result"]["session_id"]
        answers = [created]
        errors = []
        for _ in range(2):
            called = rpc(http, "tools/call", name="increment_counter", arguments={"count": 1}, session_id=session_id)
            answers.append(called)
            errors.append(called.json().get("error"))
        ws_url = url.replace("http://", "ws://") + f"/openenv/ws?session_id={session_id}"
        with connect(ws_url, open_timeout=30) as socket:
            socket.send(json.dumps({"type": "step", "data": {"tool_name": "increment_counter", "arguments": {}}}))
            over_socket = json.loads(socket.recv(timeout=30))
            socket.send(json.dumps({"type": "close"}))
        closed = rpc(http, "openenv/session/close", session_id=session_id)
        answers.append(closed)
        errors.append(closed.json().get("error"))
    return {
        "statuses": [a.status_code for a in answers],
        "workers": {a.headers.get("x-ngym-worker") for a in answers},
        "errors": errors,
        "socket": over_socket,
    }


def test_openenv_http_episodes_stay_on_their_worker(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    served = serve(
        [str(VENV_BIN / "ngym"), "run", "example_session_state_mgmt", "--workers", "2", "--port", str(port)], port
    )
    with ThreadPoolExecutor(6) as pool:
        by_cookie = list(pool.map(lambda i: http_episode(served.url, i), range(16)))
        by_id = list(pool.map(lambda i: mcp_episode(served.url, i), range(8)))
    assert all(set(r["statuses"]) == {200} and r["reward"] == 1.0 for r in by_cookie), by_cookie
    assert all(len(r["workers"]) == 1 for r in by_cookie)  # each episode on one worker
    assert set().union(*(r["workers"] for r in by_cookie)) == {"w0", "w1"}  # and both workers held episodes
    assert all(set(r["statuses"]) == {200} and r["errors"] == [None] * 3 for r in by_id), by_id
    assert all(r["socket"]["type"] == "observation" for r in by_id), [r["socket"] for r in by_id]
    assert all(len(r["workers"]) == 1 for r in by_id)
    assert twice_named(served.url) == {"one header": 400, "two headers": 400, "query": "SESSION_ERROR", "mcp": 400}


def twice_named(url: str) -> dict[str, Any]:
    """Requests naming two episodes, one held by each worker: refused, by the proxy or the worker (each used to be
    routed by the first name and served by the last: a 409 "no episode", or a new episode for a reset)."""
    held: dict[str, str] = {}
    with httpx.Client(base_url=f"{url}/openenv", timeout=60) as http:
        while len(held) < 2:
            reset = http.post("/reset", json={})
            held[reset.headers["x-ngym-worker"]] = reset.cookies["ngym-openenv-episode"]
            http.cookies.clear()
        first, second = held["w0"], held["w1"]
        name = "ngym-openenv-episode"
        step = {"action": {"tool_name": "get_counter_value", "arguments": {}}}
        one = http.post("/step", json=step, headers={"cookie": f"{name}={first}; {name}={second}"})
        two = http.post("/step", json=step, headers=[("cookie", f"{name}={first}"), ("cookie", f"{name}={second}")])
        body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_counter_value","session_id":"%s",'
        mcp = http.post("/mcp", content=body % first + f'"session_id":"{second}"}}}}')
    ws_url = url.replace("http://", "ws://") + f"/openenv/ws?session_id={first}&session_id={second}"
    with connect(ws_url, open_timeout=30) as socket:
        query = json.loads(socket.recv(timeout=30))["data"]["code"]
    return {"one header": one.status_code, "two headers": two.status_code, "query": query, "mcp": mcp.status_code}
