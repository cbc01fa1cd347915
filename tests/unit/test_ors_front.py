"""The ORS front (ngym.server.fronts.ors) in process: its wire, sessions, rewards and refusals.

The ``openreward`` SDK's own client drives it over real sockets in tests/ors/ (``make ors``); these tests pin the
front's behaviour with plain HTTP and run in ``make test``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Body, FastAPI
from pydantic import BaseModel, Field

from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer
from ngym.examples import dataset_row, read_example_rollouts, recorded_tool_calls
from ngym.targets import resolve
from ngym.testing import RolloutClient, app_for, app_for_class, run_recorded_rollout, serve_in_process


def _sse_result(response: httpx.Response) -> Any:
    """The JSON answer of an ORS event stream (chunks joined), or ("error", data)."""
    events: list[tuple[str, str]] = []
    for block in response.text.split("\r\n\r\n"):
        name, data = "", []
        for line in block.split("\r\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if name:
            events.append((name, "\n".join(data)))
    assert events[0][0] == "task_id"
    if events[-1][0] == "error":
        return ("error", events[-1][1])
    return json.loads("".join(data for name, data in events[1:]))


class ORS:
    """A minimal ORS client over an httpx client (the SDK's calls, one by one)."""

    def __init__(self, http: httpx.AsyncClient, prefix: str = "/ors") -> None:
        self.http = http
        self.prefix = prefix

    async def session(self, **create: Any) -> str:
        # as the SDK asks for it: an event stream
        opened = await self.http.post(f"{self.prefix}/create_session", headers={"accept": "text/event-stream"})
        sid = _sse_result_sid(opened)
        created = await self.http.post(f"{self.prefix}/create", json=create, headers={"x-session-id": sid})
        assert created.status_code == 200, created.text
        return sid

    async def call(self, sid: str, name: str, arguments: dict[str, Any]) -> Any:
        answer = await self.http.post(
            f"{self.prefix}/call", json={"name": name, "input": arguments}, headers={"x-session-id": sid}
        )
        assert answer.status_code == 200, answer.text
        return _sse_result(answer)

    async def delete(self, sid: str) -> None:
        assert (await self.http.post(f"{self.prefix}/delete", headers={"x-session-id": sid})).status_code == 200


def _sse_result_sid(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    first = response.text.split("\r\n")[1]
    assert first.startswith("data: ")
    return first[6:]


async def _live(http: httpx.AsyncClient) -> int:
    return int((await http.get("/health")).json()["live_sessions"])


async def test_splits_tasks_and_tools_come_from_the_environment() -> None:
    async with serve_in_process(app_for("example_single_tool_call")) as http:
        assert (await http.get("/ors/splits")).json() == [{"name": "example", "type": "validation"}]
        folder = resolve("example_single_tool_call").folder
        assert folder is not None
        rows = [json.loads(line) for line in (folder / "data" / "example.jsonl").read_text().splitlines() if line]
        assert (await http.post("/ors/num_tasks", json={"split": "example"})).json() == {"num_tasks": len(rows)}
        task = (await http.post("/ors/task", json={"split": "example", "index": 1})).json()
        assert task == {"task": rows[1], "env_name": "example_single_tool_call"}
        tools = (await http.get("/ors/example_single_tool_call/tools")).json()
        by_name = {t["name"]: t for t in tools["tools"]}
        assert set(by_name) == {"get_weather", "submit_answer"}
        assert by_name["get_weather"]["input_schema"]["properties"]["city"]["type"] == "string"
        assert tools["terminal_tool"] == {
            "name": "submit_answer",
            "arg": "answer",
            "description": by_name["submit_answer"]["description"],
        }


@pytest.mark.parametrize("name", ["example_single_tool_call", "example_session_state_mgmt", "workplace_assistant"])
async def test_recorded_rollouts_score_the_same_as_on_nemo_gyms_wire(name: str) -> None:
    """Each recorded rollout's tool calls and final message, replayed through ORS and through NeMo Gym's wire on
    the same server: equal rewards, every ngym session closed afterwards."""
    folder = resolve(name).folder
    assert folder is not None
    rollouts = read_example_rollouts(folder / "data" / "example_rollouts.jsonl")
    async with serve_in_process(app_for(name)) as http:
        ors = ORS(http)
        for index, rollout in enumerate(rollouts):
            nemo = await run_recorded_rollout(RolloutClient(http), rollout)
            sid = await ors.session(split="example", index=index)
            for call in recorded_tool_calls(rollout["response"]):
                out = await ors.call(sid, call.name, call.arguments)
                assert out["ok"] and out["output"]["finished"] is False and out["output"]["reward"] is None
            final = _final_text(rollout["response"])
            out = await ors.call(sid, "submit_answer", {"answer": final})
            assert out["output"]["finished"] is True
            assert out["output"]["reward"] == nemo["reward"] == rollout["reward"], (index, out, nemo)
            assert not {"responses_create_params", "response", "reward"} & set(out["output"]["metadata"])
            await ors.delete(sid)
        assert await _live(http) == 0


def _final_text(response: dict[str, Any]) -> str:
    messages = [item for item in response["output"] if item.get("type") == "message"]
    return "".join(part.get("text", "") for part in messages[-1]["content"]) if messages else ""


async def test_an_episode_sent_as_task_spec_is_seeded_with_that_row() -> None:
    folder = resolve("example_session_state_mgmt").folder
    assert folder is not None
    row = dataset_row(read_example_rollouts(folder / "data" / "example_rollouts.jsonl")[0])
    async with serve_in_process(app_for("example_session_state_mgmt")) as http:
        ors = ORS(http)
        sid = await ors.session(task_spec={**row, "initial_count": 40, "expected_count": 42})
        prompt = (await http.get("/ors/prompt", headers={"x-session-id": sid})).json()
        assert prompt == [
            {"type": "text", "text": row["responses_create_params"]["input"][0]["content"], "detail": None}
        ]
        await ors.call(sid, "increment_counter", {"count": 2})
        counted = await ors.call(sid, "get_counter_value", {})
        assert json.loads(counted["output"]["blocks"][0]["text"]) == {"count": 42}
        assert (await ors.call(sid, "submit_answer", {"answer": "42"}))["output"]["reward"] == 1.0
        late = await ors.call(sid, "get_counter_value", {})
        assert late == {"ok": False, "error": late["error"], "reason": "episode_finished"}
        await ors.delete(sid)
        assert await _live(http) == 0


async def test_parallel_sessions_keep_their_own_state() -> None:
    async with serve_in_process(app_for("example_session_state_mgmt")) as http:
        ors = ORS(http)
        spec = {"responses_create_params": {"input": "count"}, "initial_count": 0, "expected_count": 5}
        first, second = await ors.session(task_spec=spec), await ors.session(task_spec={**spec, "expected_count": 7})
        await ors.call(first, "increment_counter", {"count": 5})
        await ors.call(second, "increment_counter", {"count": 3})
        await ors.call(second, "increment_counter", {"count": 4})
        assert (await ors.call(first, "submit_answer", {"answer": ""}))["output"]["reward"] == 1.0
        assert (await ors.call(second, "submit_answer", {"answer": ""}))["output"]["reward"] == 1.0
        await ors.delete(first)
        await ors.delete(second)
        assert await _live(http) == 0


async def test_a_failed_judge_is_no_reward_not_zero() -> None:
    """The judge unreachable: /verify masks the sample, and ORS reports no reward (null), never 0.0."""
    app = app_for("equivalence_llm_judge", judge_base_url="http://127.0.0.1:9/v1", judge_timeout_seconds=2)
    async with serve_in_process(app) as http:
        ors = ORS(http)
        sid = await ors.session(split="example", index=0)
        out = await ors.call(sid, "submit_answer", {"answer": "Paris"})
        assert out["ok"] and out["output"]["finished"] is True
        assert out["output"]["reward"] is None
        assert out["output"]["metadata"]["mask_sample"] is True
        await ors.delete(sid)
        assert await _live(http) == 0


async def test_a_lost_session_is_no_reward() -> None:
    """The session's state gone from the server (here: closed on NeMo Gym's wire behind the front's back): the
    next tool call ends the episode with no reward."""
    app = app_for("example_session_state_mgmt")
    async with serve_in_process(app) as http:
        ors = ORS(http)
        spec = {"responses_create_params": {"input": "count"}, "initial_count": 0, "expected_count": 1}
        sid = await ors.session(task_spec=spec)
        episode = app.state.ngym_fronts["ors"].episodes.get(sid)
        closed = await http.post("/close_session", json={}, headers={"cookie": episode.session.cookie.decode()})
        assert closed.status_code == 200
        out = await ors.call(sid, "increment_counter", {"count": 1})
        assert out["ok"] and out["output"]["finished"] is True and out["output"]["reward"] is None
        assert out["output"]["metadata"]["failure_kind"] == "session_lost"
        await ors.delete(sid)
        assert await _live(http) == 0


async def test_bad_input_is_a_4xx_that_says_what_to_fix() -> None:
    async with serve_in_process(app_for("example_single_tool_call")) as http:

        async def status(method: str, path: str, **kwargs: Any) -> tuple[int, str]:
            answer = await http.request(method, path, **kwargs)
            return answer.status_code, json.dumps(answer.json()["detail"])

        sid = {"x-session-id": "not-created"}
        assert (await status("POST", "/ors/create", json={"split": "example", "index": 0}))[0] == 400  # no header
        code, detail = await status("POST", "/ors/create", json={"split": "nope", "index": 0}, headers=sid)
        assert code == 400 and "Invalid split: 'nope'" in detail
        code, detail = await status("POST", "/ors/create", json={"split": "example", "index": 99}, headers=sid)
        assert code == 400 and "Invalid index: 99 is out of range" in detail
        code, detail = await status("POST", "/ors/create", json={"split": "example"}, headers=sid)
        assert code == 422 and "split and index" in detail
        code, detail = await status("POST", "/ors/create", content=b"{not json", headers=sid)
        assert code == 422 and "json_invalid" in detail
        code, detail = await status("POST", "/ors/task", json={"split": "example", "index": "x"})
        assert code == 422 and "index" in detail
        code, detail = await status("GET", "/ors/another_env/tools")
        assert code == 404 and "another_env" in detail
        code, detail = await status("POST", "/ors/call", json={"name": "get_weather", "input": {}}, headers=sid)
        assert code == 404 and "POST /create first" in detail
        code, detail = await status("POST", "/ors/create", json={"task_spec": [1]}, headers=sid)
        assert code == 422 and "task_spec" in detail

        ors = ORS(http)
        real = await ors.session(split="example", index=0)
        bad = await ors.call(real, "get_weather", {"town": "Oslo"})
        assert bad["ok"] is False and bad["reason"] == "input_validation" and "city" in bad["error"]
        assert bad["error"].startswith("Tool input validation error: ")  # as openreward's server words it
        unknown = await ors.call(real, "launch", {})
        assert unknown["ok"] is False and unknown["reason"] == "not_found" and "get_weather" in unknown["error"]
        await ors.delete(real)
        assert await _live(http) == 0


class _CallBody(BaseModel):
    text: str


class _ToolNamedLikeORS(SimpleResourcesServer):
    """A tool route named like an ORS route (``/call``): NeMo Gym's agents still reach it at the root."""

    domain = Domain.AGENT

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/call")(self.call)
        return app

    async def call(self, body: _CallBody) -> dict[str, str]:
        return {"echo": body.text}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        called = any(call.name == "call" for call in body.response.function_calls())
        return BaseVerifyResponse(**body.model_dump(), reward=1.0 if called else 0.0)


async def test_root_requests_are_ors_only_with_ors_headers() -> None:
    """The SDK sends its requests at the root (its HTTP client drops a base URL's path): those carrying
    X-Session-ID reach the front; NeMo Gym's agents, which never send it, reach the tool route of that name."""
    async with serve_in_process(app_for_class(_ToolNamedLikeORS, name="echo")) as http:
        nemo = RolloutClient(http)
        await nemo.call("/seed_session", {"responses_create_params": {"input": "hi"}})
        assert await nemo.call("/call", {"text": "hello"}) == {"echo": "hello"}

        ors = ORS(http, prefix="")
        sid = await ors.session(task_spec={"responses_create_params": {"input": "say hi"}})
        out = await ors.call(sid, "call", {"text": "over ORS"})
        assert json.loads(out["output"]["blocks"][0]["text"]) == {"echo": "over ORS"}
        assert (await ors.call(sid, "submit_answer", {"answer": "done"}))["output"]["reward"] == 1.0
        # the SDK's ping: {base_url}/ping with a base URL ending in "/"
        assert (await http.post("/ors//ping", headers={"x-session-id": sid})).status_code == 200
        await ors.delete(sid)


async def test_the_servers_request_limits_hold_for_ors_bodies() -> None:
    """ORS requests skip the app's routes, not its limits: a body over ``max_request_body_bytes`` is a 413."""
    async with serve_in_process(app_for("example_single_tool_call", max_request_body_bytes=2000)) as http:
        spec = {"responses_create_params": {"input": "x" * 5000}}
        answer = await http.post("/ors/create", json={"task_spec": spec}, headers={"x-session-id": "big"})
        assert answer.status_code == 413 and "max_request_body_bytes" in answer.json()["detail"]
        assert await _live(http) == 0


async def test_splits_can_point_at_any_jsonl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``NGYM_ORS_TASKS`` names the splits and their files; a broken file is a 500 that names it."""
    (tmp_path / "train.jsonl").write_text(json.dumps({"responses_create_params": {"input": "Weather in Rome?"}}) + "\n")
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    monkeypatch.setenv("NGYM_ORS_TASKS", f"train={tmp_path / 'train.jsonl'},broken={tmp_path / 'broken.jsonl'}")
    async with serve_in_process(app_for("example_single_tool_call")) as http:
        splits = (await http.get("/ors/splits")).json()
        assert splits == [{"name": "train", "type": "train"}, {"name": "broken", "type": "validation"}]
        ors = ORS(http)
        sid = await ors.session(split="train", index=0)
        prompt = (await http.get("/ors/prompt", headers={"x-session-id": sid})).json()
        assert prompt[0]["text"] == "Weather in Rome?"
        await ors.delete(sid)
        broken = await http.post("/ors/num_tasks", json={"split": "broken"})
        assert broken.status_code == 500 and "broken.jsonl:1: not JSON" in broken.json()["detail"]


async def test_finished_episodes_never_deleted_do_not_fill_the_table() -> None:
    """A client that never calls /delete: its finished episodes are forgotten when the table reaches
    ``max_sessions``, so new sessions still open (the ngym sessions were closed by verify)."""
    app = app_for("example_single_tool_call", max_sessions=4)
    async with serve_in_process(app) as http:
        ors = ORS(http)
        for _ in range(10):
            sid = await ors.session(split="example", index=0)
            assert (await ors.call(sid, "submit_answer", {"answer": "x"}))["output"]["finished"] is True
        assert len(app.state.ngym_fronts["ors"].episodes) <= 4
        assert await _live(http) == 0


async def test_a_resumed_call_answers_the_same_run_without_running_it_again() -> None:
    """A client whose /call stream was cut resends it with the task id: the same answer, the tool not run twice."""
    async with serve_in_process(app_for("example_session_state_mgmt")) as http:
        ors = ORS(http)
        spec = {"responses_create_params": {"input": "count"}, "initial_count": 0, "expected_count": 1}
        sid = await ors.session(task_spec=spec)
        headers = {"x-session-id": sid}
        first = await http.post("/ors/call", json={"name": "increment_counter", "input": {"count": 1}}, headers=headers)
        task_id = first.text.split("\r\n")[1][6:]
        again = await http.post(
            "/ors/call", json={"name": "increment_counter", "input": {"count": 1}, "task_id": task_id}, headers=headers
        )
        assert _sse_result(again) == _sse_result(first)
        counted = await ors.call(sid, "get_counter_value", {})
        assert json.loads(counted["output"]["blocks"][0]["text"]) == {"count": 1}  # incremented once
        unknown = await http.post("/ors/call", json={"name": "x", "input": {}, "task_id": "nope"}, headers=headers)
        assert _sse_result(unknown) == ("error", "unknown task_id")
        await ors.delete(sid)


async def test_a_long_call_streams_pings_until_its_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call not done within PING_SECONDS is answered as a stream: task id, a ping per interval, then the answer."""
    import asyncio

    from ngym.server.fronts.ors import sse

    monkeypatch.setattr(sse, "PING_SECONDS", 0.01)
    running: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    response = await sse.respond("t1", running)
    chunks = response.body_iterator  # type: ignore[attr-defined]
    assert await chunks.__anext__() == sse.event("task_id", "t1")
    assert await chunks.__anext__() == ": ping\r\n\r\n"  # the answer is not there yet: it cannot have ended
    running.set_result('{"ok": true}')
    rest = [chunk async for chunk in chunks]
    assert rest[-1] == sse.event("end", '{"ok": true}')


class _DeclaredSchemaTools(SimpleResourcesServer):
    """Tools whose body is a plain dict with the schema given for /docs, as OpenEnv's and verifiers' are served."""

    domain = Domain.AGENT

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        schema = {"type": "object", "properties": {"guess": {"type": "string"}}, "required": ["guess"]}
        app.post(
            "/guess",
            summary="guess",
            description="Guess the word.",
            openapi_extra={"requestBody": {"content": {"application/json": {"schema": schema}}}},
        )(self.guess)
        return app

    async def guess(self, body: dict[str, Any] = Body(default_factory=dict)) -> dict[str, Any]:  # noqa: B008
        return {"correct": body.get("guess") == "ngym"}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


async def test_a_tool_schema_given_for_the_docs_is_the_ors_tool_schema() -> None:
    async with serve_in_process(app_for_class(_DeclaredSchemaTools, name="words")) as http:
        tools = {t["name"]: t for t in (await http.get("/ors/tools")).json()["tools"]}
        assert tools["guess"]["input_schema"]["required"] == ["guess"]
        assert tools["guess"]["description"] == "Guess the word."


class _CatchAllCalculator(SimpleResourcesServer):
    """Tools behind one parameterised route (``POST /{path}``, as NeMo Gym's math_advanced_calculations has them):
    only the rows name them."""

    domain = Domain.MATH

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/{path}")(self.route)
        return app

    async def route(self, path: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:  # noqa: B008
        if path != "add":
            return {"error": f"no tool {path}"}
        return {"result": body["a"] + body["b"]}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        called = [call.name for call in body.response.function_calls()]
        return BaseVerifyResponse(**body.model_dump(), reward=1.0 if called == ["add"] else 0.0)


async def test_tools_behind_a_catch_all_route_are_the_rows_declared_ones() -> None:
    add = {"type": "function", "name": "add", "parameters": {"type": "object"}}
    verify = {"type": "function", "name": "verify", "parameters": {"type": "object"}}  # a protocol route: never
    row = {"responses_create_params": {"input": "1 + 2?", "tools": [add, verify]}}
    async with serve_in_process(app_for_class(_CatchAllCalculator, name="calculator")) as http:
        ors = ORS(http)
        sid = await ors.session(task_spec=row)
        listed = (await http.get("/ors/task_tools", headers={"x-session-id": sid})).json()
        assert [t["name"] for t in listed["tools"]] == ["add", "submit_answer"]
        out = await ors.call(sid, "add", {"a": 1, "b": 2})
        assert json.loads(out["output"]["blocks"][0]["text"]) == {"result": 3}
        assert (await ors.call(sid, "submit_answer", {"answer": "3"}))["output"]["reward"] == 1.0
        await ors.delete(sid)
        assert await _live(http) == 0


async def test_declared_tools_without_a_route_are_called_as_nemo_gyms_agent_calls_them() -> None:
    """A function-calling row (xlam_fc's kind): its tools exist only in the row, verify reads the calls. Over ORS
    the model may call them; each answers what NeMo Gym's agent would get (a 404) and is in the trajectory."""
    lookup = {"type": "function", "name": "lookup_weather", "parameters": {"type": "object"}}
    row = {"responses_create_params": {"input": "weather in Oslo?", "tools": [lookup]}}
    async with serve_in_process(app_for_class(_ToolNamedLikeORS, name="echo")) as http:
        ors = ORS(http)
        sid = await ors.session(task_spec=row)
        out = await ors.call(sid, "lookup_weather", {"city": "Oslo"})
        assert out["ok"] is True and "Not Found" in out["output"]["blocks"][0]["text"]
        assert (await ors.call(sid, "submit_answer", {"answer": "cold"}))["output"]["finished"] is True
        await ors.delete(sid)


class _EchoAction(BaseModel):
    """An OpenEnv-style Action: ``metadata`` optional with a default factory (no ``default`` in its schema)."""

    model_config = {"extra": "forbid"}
    message: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    note: str | None = None


class _Echo(SimpleResourcesServer):
    domain = Domain.OTHER

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/echo")(self.echo)
        return app

    async def echo(self, body: _EchoAction) -> dict[str, Any]:
        return {"message": body.message, "metadata": body.metadata, "note": body.note}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


async def test_a_null_for_an_optional_parameter_that_takes_none_is_left_out() -> None:
    """TRL's OpenRewardSpec calls its generated method with every parameter, None for one the model did not give:
    the tool gets the call without it (its default), not a 422; a parameter that takes null keeps it."""
    async with serve_in_process(app_for_class(_Echo, name="echo")) as http:
        ors = ORS(http)
        sid = await ors.session(task_spec={"responses_create_params": {"input": "say hi"}})
        out = await ors.call(sid, "echo", {"message": "hi", "metadata": None, "note": None})
        assert out["ok"] is True, out
        assert json.loads(out["output"]["blocks"][0]["text"]) == {"message": "hi", "metadata": {}, "note": None}
        refused = await ors.call(sid, "echo", {"message": None})  # a required one: passed on, and refused
        assert refused["ok"] is False
        await ors.delete(sid)
