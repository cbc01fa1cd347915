"""The OpenEnv front (``/openenv``), in process: episodes over the WebSocket score as NeMo Gym's wire does.

OpenEnv's own clients and ``openenv validate`` drive it over real sockets in
``plugins/ngym_openenv/tests/test_openenv_front.py``; here the protocol is spoken by hand through Starlette's
test client, against every built-in's recorded rollouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.routing import Mount

from ngym.examples import dataset_row, read_example_rollouts, recorded_tool_calls
from ngym.rollout.replay_model import create_replay_app
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.server.fronts.lazy import LazyApp
from ngym.server.fronts.openenv import MOUNT_PATH
from ngym.server.protocol import Response
from ngym.targets import resolve
from ngym.testing import RolloutClient, app_for, run_recorded_rollout, serve_in_process

BUILTINS = [
    "example_single_tool_call",
    "example_session_state_mgmt",
    "workplace_assistant",
    "math_with_code",
    "equivalence_llm_judge",
]


def _rollouts(name: str) -> list[dict[str, Any]]:
    folder = resolve(name).folder
    assert folder is not None
    return read_example_rollouts(folder / "data" / "example_rollouts.jsonl")


@contextlib.contextmanager
def _environment(name: str, **fields: Any) -> Iterator[FastAPI]:
    """The environment's app; a judge environment's judge is the scripted one (replay model), in a thread."""
    folder = resolve(name).folder
    assert folder is not None
    if "judge_base_url" in (folder / "configs" / f"{name}.yaml").read_text() and "judge_base_url" not in fields:
        with serve_app_in_thread(create_replay_app(_rollouts(name))) as judge:
            yield app_for(name, judge_base_url=f"{judge}/v1", **fields)
    else:
        yield app_for(name, **fields)


def _front(app: FastAPI) -> LazyApp:
    return next(r.app for r in app.router.routes if isinstance(r, Mount) and r.path == MOUNT_PATH)


def _live_sessions(app: FastAPI) -> int:
    server = _front(app).app.state.front.server  # type: ignore[attr-defined]
    count: int = asyncio.run(server.sessions.store.count())
    return count


def _final_text(response: dict[str, Any]) -> str:
    return Response.model_validate(response).final_text()


def _drive(socket: Any, rollout: dict[str, Any]) -> dict[str, Any]:
    """One episode over the WebSocket: reset with the rollout's row, its recorded tool calls, its final answer."""
    socket.send_json({"type": "reset", "data": {"row": dataset_row(rollout)}})
    reset = socket.receive_json()
    assert reset["type"] == "observation", reset
    for call in recorded_tool_calls(rollout["response"]):
        socket.send_json({"type": "step", "data": {"tool_name": call.name, "arguments": call.arguments}})
        answer = socket.receive_json()
        assert answer["type"] == "observation" and answer["data"]["done"] is False, answer
    socket.send_json({"type": "step", "data": {"message": _final_text(rollout["response"])}})
    final: dict[str, Any] = socket.receive_json()
    assert final["type"] == "observation" and final["data"]["done"] is True, final
    return final["data"]


async def _nemo_rewards(app: FastAPI, rollouts: list[dict[str, Any]]) -> list[Any]:
    async with serve_in_process(app) as http:
        return [(await run_recorded_rollout(RolloutClient(http), r))["reward"] for r in rollouts]


@pytest.mark.parametrize("name", BUILTINS)
def test_openenv_episodes_score_as_nemo_wire(name: str) -> None:
    """Every built-in's recorded rollouts: the OpenEnv front's reward = NeMo's wire's = the recorded one; no
    session is left live after the sockets close."""
    rollouts = _rollouts(name)
    with _environment(name) as app:
        nemo = asyncio.run(_nemo_rewards(app, rollouts))
    with _environment(name) as app, TestClient(app) as client:
        front = []
        for rollout in rollouts:
            with client.websocket_connect(f"{MOUNT_PATH}/ws") as socket:
                front.append(_drive(socket, rollout)["reward"])
        assert _live_sessions(app) == 0
    assert front == nemo == [r["reward"] for r in rollouts]


def test_parallel_episodes_are_isolated() -> None:
    """Two episodes interleaved on one server: each its own session and state, each scored on its own."""
    rollouts = [r for r in _rollouts("example_session_state_mgmt") if recorded_tool_calls(r["response"])][:2]
    assert len(rollouts) == 2
    with _environment("example_session_state_mgmt") as app, TestClient(app) as client:
        with client.websocket_connect(f"{MOUNT_PATH}/ws") as a, client.websocket_connect(f"{MOUNT_PATH}/ws") as b:
            sockets = [a, b]
            for socket, rollout in zip(sockets, rollouts, strict=True):
                socket.send_json({"type": "reset", "data": {"row": dataset_row(rollout)}})
                socket.receive_json()
            calls = [recorded_tool_calls(r["response"]) for r in rollouts]
            for step in range(max(len(c) for c in calls)):  # one step of each in turn
                for socket, own in zip(sockets, calls, strict=True):
                    if step < len(own):
                        socket.send_json(
                            {"type": "step", "data": {"tool_name": own[step].name, "arguments": own[step].arguments}}
                        )
                        assert socket.receive_json()["type"] == "observation"
            rewards = []
            for socket, rollout in zip(sockets, rollouts, strict=True):
                socket.send_json({"type": "step", "data": {"message": _final_text(rollout["response"])}})
                rewards.append(socket.receive_json()["data"]["reward"])
            states = []
            for socket in sockets:
                socket.send_json({"type": "state"})
                states.append(socket.receive_json()["data"])
        assert _live_sessions(app) == 0
    assert rewards == [r["reward"] for r in rollouts]
    assert states[0]["episode_id"] != states[1]["episode_id"] and all(s["done"] for s in states)


def test_a_socket_closed_mid_episode_closes_its_session() -> None:
    rollout = _rollouts("example_session_state_mgmt")[0]
    with _environment("example_session_state_mgmt") as app, TestClient(app) as client:
        with client.websocket_connect(f"{MOUNT_PATH}/ws") as socket:
            socket.send_json({"type": "reset", "data": {"row": dataset_row(rollout)}})
            socket.receive_json()
            assert _live_sessions(app) == 1
        assert _live_sessions(app) == 0


def test_a_failed_judge_is_no_reward_never_zero(tmp_path: Path) -> None:
    """A judge that cannot be reached: the episode ends with reward None (masked), as NeMo's wire masks it."""
    rollout = _rollouts("equivalence_llm_judge")[0]
    dead = "http://127.0.0.1:9/v1"  # the discard port: nothing answers
    with _environment("equivalence_llm_judge", judge_base_url=dead, judge_max_retries=0) as app:
        nemo = asyncio.run(_nemo_verify(app, rollout))
        assert nemo["mask_sample"] is True
        with TestClient(app) as client, client.websocket_connect(f"{MOUNT_PATH}/ws") as socket:
            final = _drive(socket, rollout)
    assert final["reward"] is None and final["done"] is True
    assert final["metadata"]["masked"] is True and final["metadata"]["failure_kind"] == nemo["failure_kind"]


async def _nemo_verify(app: FastAPI, rollout: dict[str, Any]) -> dict[str, Any]:
    async with serve_in_process(app) as http:
        return await run_recorded_rollout(RolloutClient(http), rollout)


def test_bad_input_is_a_clear_error() -> None:
    with _environment("example_single_tool_call") as app, TestClient(app) as client:
        with client.websocket_connect(f"{MOUNT_PATH}/ws") as socket:
            socket.send_text("{not json")
            assert socket.receive_json()["data"]["code"] == "INVALID_JSON"
            socket.send_json({"type": "step", "data": {"tool_name": "get_weather", "arguments": {"city": "Oslo"}}})
            assert "reset first" in socket.receive_json()["data"]["message"]
            socket.send_json({"type": "reset", "data": {"task_index": 10_000}})
            assert "out of range" in socket.receive_json()["data"]["message"]
            socket.send_json({"type": "teleport"})
            assert socket.receive_json()["data"]["code"] == "UNKNOWN_TYPE"
            socket.send_json({"type": "reset", "data": {"task_index": 0}})
            assert socket.receive_json()["type"] == "observation"
            socket.send_json({"type": "step", "data": {"arguments": {}}})
            assert "tool_name" in socket.receive_json()["data"]["message"]
            socket.send_json({"type": "step", "data": {"tool_name": "verify", "arguments": {}}})
            answer = socket.receive_json()["data"]
            assert answer["observation"]["error"]["error_type"] == "tool_not_found" and answer["reward"] is None
            socket.send_json({"type": "step", "data": {"tool_name": "get_weather", "arguments": {"town": 3}}})
            assert socket.receive_json()["data"]["observation"]["error"]["error_type"] == "invalid_args"
        assert client.post(f"{MOUNT_PATH}/step", json={"action": {"message": "hi"}}).status_code == 409
        assert client.post(f"{MOUNT_PATH}/reset", json={"task_index": -1}).status_code == 422
        assert client.post(f"{MOUNT_PATH}/reset", json={"task_index": 10_000}).status_code == 422
        mcp = client.post(f"{MOUNT_PATH}/mcp", content=b"[[[")
        assert mcp.status_code == 200 and mcp.json()["error"]["code"] == -32700


def test_http_episode_with_its_cookie() -> None:
    """``/reset`` then ``/step`` over plain HTTP: the episode cookie carries the episode; the reward is verify's."""
    rollout = _rollouts("example_single_tool_call")[0]
    with _environment("example_single_tool_call") as app, TestClient(app) as client:
        reset = client.post(f"{MOUNT_PATH}/reset", json={"row": dataset_row(rollout)})
        assert reset.status_code == 200 and reset.json()["observation"]["prompt"]
        for call in recorded_tool_calls(rollout["response"]):
            step = client.post(
                f"{MOUNT_PATH}/step", json={"action": {"tool_name": call.name, "arguments": call.arguments}}
            )
            assert step.status_code == 200 and step.json()["observation"]["error"] is None
        final = client.post(f"{MOUNT_PATH}/step", json={"action": {"message": _final_text(rollout["response"])}})
        assert final.json()["reward"] == rollout["reward"] and final.json()["done"] is True
        assert client.get(f"{MOUNT_PATH}/state").json()["done"] is True
        assert _live_sessions(app) == 0


def test_nemo_wire_requests_never_build_the_front() -> None:
    """A server used only over NeMo Gym's wire never builds (nor imports for it) the OpenEnv front."""
    rollout = _rollouts("example_single_tool_call")[0]
    with _environment("example_single_tool_call") as app:
        asyncio.run(_nemo_verify(app, rollout))
        assert _front(app)._app is None
        with TestClient(app) as client:
            assert client.get("/health").json()["status"] == "ok"
            assert client.get(f"{MOUNT_PATH}/health").json() == {"status": "healthy"}
        assert _front(app)._app is not None


def test_mcp_json_rpc_session_and_tools() -> None:
    """OpenEnv's HTTP MCP: create a session, list and call tools in it, end it with final_answer, close it."""
    rollout = _rollouts("example_single_tool_call")[0]
    with _environment("example_single_tool_call") as app, TestClient(app) as client:

        def rpc(method: str, **params: Any) -> dict[str, Any]:
            answer: dict[str, Any] = client.post(
                f"{MOUNT_PATH}/mcp", json={"jsonrpc": "2.0", "method": method, "params": params, "id": 1}
            ).json()
            return answer

        assert rpc("nope")["error"]["code"] == -32601
        assert client.post(f"{MOUNT_PATH}/mcp", json={}).json()["jsonrpc"] == "2.0"
        session = rpc("openenv/session/create")["result"]["session_id"]
        names = [t["name"] for t in rpc("tools/list", session_id=session)["result"]["tools"]]
        assert "get_weather" in names and "final_answer" in names
        with client.websocket_connect(f"{MOUNT_PATH}/ws?session_id={session}") as socket:
            socket.send_json({"type": "reset", "data": {"row": dataset_row(rollout)}})
            assert socket.receive_json()["type"] == "observation"
        for call in recorded_tool_calls(rollout["response"]):
            result = rpc("tools/call", name=call.name, arguments=call.arguments, session_id=session)["result"]
            assert result["isError"] is False and result["data"]
        text = _final_text(rollout["response"])
        final = rpc("tools/call", name="final_answer", arguments={"content": text}, session_id=session)["result"]
        assert final["reward"] == rollout["reward"] and final["done"] is True
        assert rpc("openenv/session/close", session_id=session)["result"]["closed"] is True
        assert rpc("openenv/session/close", session_id=session)["error"]["code"] == -32602
        assert _live_sessions(app) == 0


def test_schema_and_metadata_are_openenv_shaped() -> None:
    with _environment("workplace_assistant") as app, TestClient(app) as client:
        schema = client.get(f"{MOUNT_PATH}/schema").json()
        assert {"action", "observation", "state"} <= set(schema)
        meta = client.get(f"{MOUNT_PATH}/metadata").json()
        assert meta["name"] == "workplace_assistant" and isinstance(meta["description"], str)
        paths = client.get(f"{MOUNT_PATH}/openapi.json").json()["paths"]
        assert {"/reset", "/step", "/state", "/health", "/metadata", "/schema", "/mcp"} <= set(paths)
        assert json.dumps(schema)  # serialisable


def test_a_full_server_refuses_an_episode_with_capacity_reached() -> None:
    """At the server's session limit a reset is refused as OpenEnv's server refuses one (CAPACITY_REACHED; 503
    over HTTP), and the episode that holds the session is unaffected."""
    with (
        _environment("example_single_tool_call", max_sessions=1) as app,
        TestClient(app) as client,
        client.websocket_connect(f"{MOUNT_PATH}/ws") as first,
        client.websocket_connect(f"{MOUNT_PATH}/ws") as second,
    ):
        first.send_json({"type": "reset", "data": {"task_index": 0}})
        assert first.receive_json()["type"] == "observation"
        second.send_json({"type": "reset", "data": {"task_index": 0}})
        refused = second.receive_json()
        assert refused["type"] == "error" and refused["data"]["code"] == "CAPACITY_REACHED", refused
        assert client.post(f"{MOUNT_PATH}/reset", json={"task_index": 0}).status_code == 503
        first.send_json({"type": "step", "data": {"tool_name": "get_weather", "arguments": {"city": "Oslo"}}})
        assert first.receive_json()["data"]["observation"]["error"] is None


def test_mcp_messages_on_the_websocket_share_its_episode() -> None:
    """OpenEnv's ``{"type": "mcp"}`` messages: tools/call runs in the connection's own episode."""
    rollout = _rollouts("example_session_state_mgmt")[0]
    calls = recorded_tool_calls(rollout["response"])
    with _environment("example_session_state_mgmt") as app, TestClient(app) as client:
        with client.websocket_connect(f"{MOUNT_PATH}/ws") as socket:
            socket.send_json({"type": "reset", "data": {"row": dataset_row(rollout)}})
            socket.receive_json()
            for number, call in enumerate(calls):
                rpc = {"jsonrpc": "2.0", "id": number, "method": "tools/call"}
                socket.send_json(
                    {"type": "mcp", "data": {**rpc, "params": {"name": call.name, "arguments": call.arguments}}}
                )
                answer = socket.receive_json()
                assert answer["type"] == "mcp" and answer["data"]["result"]["isError"] is False, answer
            socket.send_json({"type": "step", "data": {"message": _final_text(rollout["response"])}})
            assert socket.receive_json()["data"]["reward"] == rollout["reward"]
        assert _live_sessions(app) == 0


def test_a_lost_session_is_no_reward_never_zero() -> None:
    """The episode's session is gone (expired, its worker restarted): the final answer's reward is None, masked
    ``session_lost``, as NeMo Gym's wire masks it; never 0.0."""
    rollout = _rollouts("example_session_state_mgmt")[0]
    with _environment("example_session_state_mgmt") as app, TestClient(app) as client:
        with client.websocket_connect(f"{MOUNT_PATH}/ws") as socket:
            socket.send_json({"type": "reset", "data": {"row": dataset_row(rollout)}})
            socket.receive_json()
            server = _front(app).app.state.front.server  # type: ignore[attr-defined]
            assert len(asyncio.run(server.sessions.store.drain())) == 1  # the server forgets it
            socket.send_json({"type": "step", "data": {"message": _final_text(rollout["response"])}})
            final = socket.receive_json()["data"]
        assert final["reward"] is None and final["done"] is True
        assert final["metadata"] == {"masked": True, "failure_kind": "session_lost"}


def test_a_flood_of_new_episodes_never_ends_one_in_progress() -> None:
    """``openenv/session/create`` and cookie-less ``/reset`` requests past ``max_sessions`` let go of episodes that
    hold no session (never reset, finished) and are refused past that; the episodes in progress carry on.
    (Each new episode let go of the oldest held one, in progress or not: 30 creates ended 6 of 6.)"""
    rollout = _rollouts("example_single_tool_call")[0]
    step = {"action": {"tool_name": "get_weather", "arguments": {"city": "Oslo"}}}
    with _environment("example_single_tool_call", max_sessions=4) as app, TestClient(app) as client:

        def rpc(method: str, **params: Any) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "method": method, "params": params, "id": 1}
            answer: dict[str, Any] = client.post(f"{MOUNT_PATH}/mcp", json=body).json()
            return answer

        def reset() -> dict[str, str]:
            answer = client.post(f"{MOUNT_PATH}/reset", json={"row": dataset_row(rollout)})
            assert answer.status_code == 200
            client.cookies.clear()
            return dict(answer.cookies)

        cookies = [reset(), reset()]
        held = rpc("openenv/session/create")["result"]["session_id"]
        assert rpc("tools/call", name="get_weather", arguments={"city": "Oslo"}, session_id=held)["result"]
        done = client.post(f"{MOUNT_PATH}/step", json={"action": {"message": "hi"}}, cookies=reset())
        assert done.json()["done"] is True
        client.cookies.clear()
        for _ in range(20):
            assert "result" in rpc("openenv/session/create")  # each lets go of an empty or finished one
        cookies.append(reset())  # a fourth session: the bound is max_sessions=4
        for _ in range(5):
            over = client.post(f"{MOUNT_PATH}/reset", json={})
            assert over.status_code == 503 and "session limit" in over.json()["detail"]
            client.cookies.clear()
            assert "session limit" in rpc("openenv/session/create")["error"]["message"]
        for jar in cookies:
            answer = client.post(f"{MOUNT_PATH}/step", json=step, cookies=jar)
            assert answer.status_code == 200 and answer.json()["observation"]["error"] is None, answer.text
        assert "result" in rpc("tools/call", name="get_weather", arguments={"city": "x"}, session_id=held)


def test_abandoned_http_episodes_are_let_go_after_the_session_ttl() -> None:
    """An episode nobody names for longer than ``session_ttl_seconds`` is let go (its trajectory freed, its session
    closed) when a new one opens; one named meanwhile is kept."""
    with _environment("example_single_tool_call", session_ttl_seconds=60) as app, TestClient(app) as client:
        kept = dict(client.post(f"{MOUNT_PATH}/reset", json={"task_index": 0}).cookies)
        client.cookies.clear()
        client.post(f"{MOUNT_PATH}/reset", json={"task_index": 0})
        client.cookies.clear()
        front = _front(app).app.state.front  # type: ignore[attr-defined]
        for episode in front.episodes.values():
            episode.last_used -= 120  # two TTLs ago
        front._swept -= 120
        assert client.get(f"{MOUNT_PATH}/state", cookies=kept).json()["step_count"] == 0  # named now: kept
        client.cookies.clear()
        client.post(f"{MOUNT_PATH}/reset", json={"task_index": 0})
        assert len(front.episodes) == 2 and kept["ngym-openenv-episode"] in front.episodes
        assert _live_sessions(app) == 2


def test_abandoned_http_episodes_are_let_go_by_the_servers_sweep() -> None:
    """The server's session sweep lets go of the held episodes it expired, though no new episode opens."""
    with _environment("example_single_tool_call", session_ttl_seconds=60) as app, TestClient(app) as client:
        client.post(f"{MOUNT_PATH}/reset", json={"task_index": 0})
        front = _front(app).app.state.front  # type: ignore[attr-defined]
        sessions = front.server.sessions
        later = time.monotonic() + 120
        sessions.store._clock = lambda: later
        for episode in front.episodes.values():
            episode.last_used -= 120
        assert client.portal is not None
        client.portal.call(sessions.sweep)
        assert len(front.episodes) == 0 and _live_sessions(app) == 0


def test_an_episode_of_another_worker_is_not_answered_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind ``--workers 2`` a request for an episode reaches another worker only while its own is down: it is
    answered 503 "retry" (``/step``, ``/state``; an error naming it on the WebSocket and over MCP), never 409 "no
    episode, POST /reset first", which would have the client give up a live episode."""
    from ngym.server.sessions.routing import ROUTE_SLOT_ENV, RouteSlot

    monkeypatch.setenv(ROUTE_SLOT_ENV, "0/2")
    theirs, unknown = RouteSlot.parse("1/2").new_id(), RouteSlot.parse("0/2").new_id()
    step = {"action": {"tool_name": "get_weather", "arguments": {"city": "Oslo"}}}
    with _environment("example_single_tool_call") as app, TestClient(app) as client:
        client.cookies.set("ngym-openenv-episode", theirs)
        for answer in (client.post(f"{MOUNT_PATH}/step", json=step), client.get(f"{MOUNT_PATH}/state")):
            assert answer.status_code == 503 and "belongs to another worker" in answer.json()["detail"]
        client.cookies.set("ngym-openenv-episode", unknown)
        assert client.post(f"{MOUNT_PATH}/step", json=step).status_code == 409  # this worker's own: no such episode
        client.cookies.clear()
        with client.websocket_connect(f"{MOUNT_PATH}/ws?session_id={theirs}") as socket:
            assert "belongs to another worker" in socket.receive_json()["data"]["message"]
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "get_weather", "session_id": theirs},
        }
        assert "belongs to another worker" in client.post(f"{MOUNT_PATH}/mcp", json=call).json()["error"]["message"]
