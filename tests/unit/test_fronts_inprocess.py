"""The fronts' shared in-process dispatcher (``ngym.server.fronts.inprocess``) and how held OpenEnv episodes are
routed behind ``--workers`` (the proxy's rules name the front's own path and cookie)."""

from __future__ import annotations

from pathlib import Path

import pydantic_core
import pytest

from ngym.examples import dataset_row, read_example_rollouts
from ngym.server.fronts import openenv
from ngym.server.fronts.inprocess import RolloutSession, post, response_json, with_field, with_raw
from ngym.server.hosting import haproxy
from ngym.server.pipeline.routes import VERIFY_ECHO
from ngym.server.sessions.routing import OPENENV_EPISODE_COOKIE, RouteSlot
from ngym.testing import app_for, serve_in_process


def test_with_field_is_the_merged_object_encoded() -> None:
    row = {"responses_create_params": {"input": 'é \u2028 "q"'}, "n": 1.5, "xs": [None, True]}
    response = {"id": "r", "output": [{"type": "message", "content": "ok"}]}
    added = with_field(pydantic_core.to_json(row), "response", response)
    assert added == pydantic_core.to_json({**row, "response": response})
    assert pydantic_core.from_json(added) == {**row, "response": response}


def test_raw_fields_added_are_what_encoding_the_whole_object_writes() -> None:
    tools = [{"type": "function", "name": "f", "parameters": {"x": 1.5}}]
    assert with_raw(b"{}", "tools", pydantic_core.to_json(tools)) == pydantic_core.to_json({"tools": tools})
    row = {"a": "é \u2028", "b": [None]}
    assert with_raw(pydantic_core.to_json(row), "k", b"[1]") == pydantic_core.to_json({**row, "k": [1]})
    response = {"id": "r", "created_at": 1.25, "output": [{"type": "message"}], "tool_choice": "auto"}
    whole = {**response, "tools": tools, "status": "completed"}
    assert response_json(response, pydantic_core.to_json(tools)) == pydantic_core.to_json(whole)


async def test_a_rollout_session_carries_its_cookie_and_lets_go() -> None:
    app = app_for("example_session_state_mgmt")
    row = {"responses_create_params": {"input": "count"}, "initial_count": 2}
    async with serve_in_process(app):
        first = await post(app, "/seed_session", row)
        cookie_name = first.set_cookies[0].split(b"=", 1)[0].decode()
        await post(app, "/close_session", {}, first.cookie(cookie_name.encode()))
        session = RolloutSession(app, cookie_name)
        assert not session.live
        seeded = await session.seed(row)
        assert seeded.status == 200 and session.live
        called = await session.call("increment_counter", {"count": 3})
        assert called.status == 200, called.text
        closed = await session.close()
        assert closed is not None and closed.status == 200 and not session.live
        assert await session.close() is None
        # a tool call of no session is the environment's own refusal, answered as it would be over HTTP
        assert (await RolloutSession(app, cookie_name).call("increment_counter", {"count": 1})).status >= 400


@pytest.mark.parametrize("name", ["example_single_tool_call", "workplace_assistant", "equivalence_llm_judge"])
async def test_a_verify_without_its_echo_is_the_whole_answer_less_the_echo(name: str) -> None:
    """A front's verify (``echo=False``) answers what the wire answers, without the row and trajectory it would
    echo back; an answer that is not the declared model (here a failed judge's, masked) comes whole; NeMo Gym's
    wire keeps the whole answer."""
    judged = name == "equivalence_llm_judge"  # a judge nothing answers: verify's masked answer
    app = app_for(name, judge_base_url="http://127.0.0.1:9/v1", judge_max_retries=0) if judged else app_for(name)
    folder = Path(__file__).resolve().parents[2] / "resources_servers" / name / "data"
    async with serve_in_process(app) as http:
        for recorded in read_example_rollouts(folder / "example_rollouts.jsonl")[:1]:
            row = dataset_row(recorded)
            body = {**row, "response": recorded["response"]}
            answers = []
            for echo in (True, False):
                seeded = await http.post("/seed_session", json=row)
                name_value = seeded.headers["set-cookie"].split(";", 1)[0]
                session = RolloutSession(app, name_value.split("=", 1)[0], name_value.split("=", 1)[1])
                verified = await session.verify(body, echo=echo)
                assert verified.status == 200, verified.text
                answers.append(verified.json())
            whole, lean = answers
            assert set(whole) >= VERIFY_ECHO
            if judged:
                assert lean["mask_sample"] is True and lean == {**whole, "response": lean["response"]}
            else:
                assert lean == {k: v for k, v in whole.items() if k not in VERIFY_ECHO}
            assert set((await http.post("/verify", json=body)).json()) >= VERIFY_ECHO


def test_the_proxy_routes_held_openenv_episodes_by_the_fronts_own_names() -> None:
    from ngym.server.fronts.openenv.app import EPISODE_COOKIE

    assert haproxy.OPENENV_PATH == openenv.MOUNT_PATH
    assert EPISODE_COOKIE == OPENENV_EPISODE_COOKIE
    backends = [haproxy.Backend("w0", "127.0.0.1", 1), haproxy.Backend("w1", "127.0.0.1", 2)]
    config = haproxy.haproxy_config(listen_fd=3, backends=backends, cookie_name="ngym-session")
    assert f"req.cook({OPENENV_EPISODE_COOKIE})" in config
    assert "url_param(session_id) if { path /openenv/ws }" in config
    assert "json_query('$.params.session_id') if { path /openenv/mcp }" in config


async def test_held_episode_ids_route_to_their_own_worker(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Worker 1 of 2 makes every held episode's id hash to itself, so the proxy sends its requests there."""
    monkeypatch.setenv("NGYM_ROUTE_SLOT", "1/2")
    app = app_for("example_session_state_mgmt")
    create = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}
    async with serve_in_process(app) as http:
        ids = [(await http.post("/openenv/mcp", json=create)).json()["result"]["session_id"] for _ in range(12)]
        row = {"responses_create_params": {"input": "count"}, "initial_count": 0}
        reset = await http.post("/openenv/reset", json={"row": row})
        assert reset.status_code == 200, reset.text
        ids.append(reset.cookies[OPENENV_EPISODE_COOKIE])
    assert all(RouteSlot.parse("1/2").owns(i) for i in ids), ids
