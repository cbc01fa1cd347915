"""A rollout whose session the server no longer holds: masked ``session_lost`` on verify, 410 on tools, never 0.0."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import Request

from ngym import BaseResourcesServerConfig, BaseVerifyResponse, Domain, SimpleResourcesServer
from ngym.server.protocol.bodies import BaseVerifyRequest
from ngym.server.sessions.lost import keeps_session_state
from ngym.testing import RolloutClient, app_for, app_for_class, make_response, serve_in_process

ROW = {"responses_create_params": {"input": "count"}, "initial_count": 1, "expected_count": 3}
VERIFY = {**ROW, "response": make_response()}


def assert_masked_lost(answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["reward"] == 0.0 and body["mask_sample"] is True
    assert body["failure_kind"] == "session_lost" and body["failure_reason"]
    assert body["_ng_failure_class"] == "session_lost"  # NeMo Gym 0.7.0's collector: failures sidecar, retried
    assert body["expected_count"] == 3  # the request is echoed back, as for any verify


async def seeded(http: httpx.AsyncClient) -> RolloutClient:
    rollout = RolloutClient(http)
    await rollout.call("/seed_session", ROW)
    await rollout.call("/increment_counter", {"count": 2})
    return rollout


async def test_verify_after_close_is_masked_not_scored(counter_http: httpx.AsyncClient) -> None:
    rollout = await seeded(counter_http)
    assert (await rollout.call("/close_session"))["closed"] is True
    assert_masked_lost(await rollout.post("/verify", VERIFY))


async def test_a_second_verify_after_the_first_closed_the_session_is_masked(counter_http: httpx.AsyncClient) -> None:
    rollout = await seeded(counter_http)
    first = await rollout.call("/verify", VERIFY)
    assert first["reward"] == 1.0 and not first["mask_sample"]
    assert_masked_lost(await rollout.post("/verify", VERIFY))


async def test_verify_after_idle_expiry_is_masked() -> None:
    async with serve_in_process(app_for("example_session_state_mgmt", session_ttl_seconds=0.2)) as http:
        rollout = await seeded(http)
        await asyncio.sleep(0.6)  # the sweeper runs every ttl/4 (at least 0.05 s)
        assert (await http.get("/health")).json()["live_sessions"] == 0
        assert_masked_lost(await rollout.post("/verify", VERIFY))


async def test_a_cookie_this_server_never_held_is_lost_on_verify_and_410_on_tools() -> None:
    """Another replica's (or a dead worker's) session: the cookie verifies (same secret), the state is not here."""
    async with serve_in_process(app_for("example_session_state_mgmt", session_secret="s")) as first:
        rollout = await seeded(first)
    async with serve_in_process(app_for("example_session_state_mgmt", session_secret="s")) as second:
        moved = RolloutClient(second)
        moved.cookie = rollout.cookie
        tool = await moved.post("/increment_counter", {"count": 1})
        assert tool.status_code == 410 and "not held by this server" in tool.json()["detail"]
        assert tool.json()["failure_kind"] == "session_lost"
        assert_masked_lost(await moved.post("/verify", VERIFY))


async def test_verify_with_no_session_at_all_is_masked_and_a_tool_call_is_409(counter_http: httpx.AsyncClient) -> None:
    never = RolloutClient(counter_http)
    tool = await never.post("/increment_counter", {"count": 1})
    assert tool.status_code == 409
    never.cookie = None
    answer = await never.post("/verify", VERIFY)
    assert_masked_lost(answer)
    assert "never seeded" in answer.json()["failure_reason"]


async def test_masked_lost_samples_are_left_out_of_aggregate_metrics(counter_http: httpx.AsyncClient) -> None:
    good = await (await seeded(counter_http)).call("/verify", VERIFY)
    lost = (await RolloutClient(counter_http).post("/verify", VERIFY)).json()
    metrics = (await counter_http.post("/aggregate_metrics", json={"verify_responses": [good, lost]})).json()
    assert metrics["agent_metrics"]["mean/reward"] == 1.0


async def test_a_stateless_environment_is_unaffected(weather_http: httpx.AsyncClient) -> None:
    from ngym.testing import make_response as response

    row = {"responses_create_params": {"input": "Weather in Oslo?"}}
    answer = await RolloutClient(weather_http).post(
        "/verify", {**row, "response": response(calls=[("get_weather", {"city": "Oslo"})])}
    )
    assert answer.status_code == 200 and answer.json()["reward"] == 1.0
    assert not answer.json().get("mask_sample") and answer.json().get("failure_kind") is None


class SelfSessions(SimpleResourcesServer):
    """NeMo Gym's pattern: the state in a dict on the server, keyed by the session id."""

    config: BaseResourcesServerConfig
    domain = Domain.OTHER

    def model_post_init(self, context: object) -> None:
        super().model_post_init(context)
        self.__dict__["sessions"] = {}

    def setup_webserver(self):  # type: ignore[no-untyped-def]
        app = super().setup_webserver()
        app.post("/step")(self.step)
        return app

    async def seed_session(self, request: Request, body):  # type: ignore[no-untyped-def,override]
        self.__dict__["sessions"][request.session["session_id"]] = 0
        return {}

    async def step(self, request: Request) -> dict[str, int]:
        sessions = self.__dict__["sessions"]
        sessions[request.session["session_id"]] += 1  # KeyError (500) for a lost session without the guard
        return {"steps": sessions[request.session["session_id"]]}

    async def verify(self, request: Request, body: BaseVerifyRequest) -> BaseVerifyResponse:
        steps = self.__dict__["sessions"].get(request.session["session_id"], 0)
        return BaseVerifyResponse(**body.model_dump(), reward=float(steps == 2))


async def test_nemo_style_in_process_state_is_stateful_and_guarded() -> None:
    assert keeps_session_state(SelfSessions)
    async with serve_in_process(app_for_class(SelfSessions, session_secret="x")) as http:
        rollout = RolloutClient(http)
        await rollout.call("/seed_session", {})
        await rollout.call("/step")
        await rollout.call("/close_session")
        step = await rollout.post("/step")
        assert step.status_code == 410  # not a KeyError 500
        answer = await rollout.post("/verify", {"responses_create_params": {"input": "x"}, "response": make_response()})
        assert answer.json()["mask_sample"] is True and answer.json()["failure_kind"] == "session_lost"


def test_which_environments_keep_state() -> None:
    from ngym.targets import resolve

    stateful = {
        name: keeps_session_state(resolve(name).server_class)
        for name in (
            "example_session_state_mgmt",
            "math_with_code",
            "workplace_assistant",
            "example_single_tool_call",
            "equivalence_llm_judge",
        )
    }
    assert stateful == {
        "example_session_state_mgmt": True,
        "math_with_code": True,
        "workplace_assistant": True,
        "example_single_tool_call": False,
        "equivalence_llm_judge": False,
    }


async def test_a_verify_that_scores_from_the_request_alone_is_not_masked() -> None:
    """workplace_assistant replays the response's calls on fresh databases: its reward does not rest on the
    session, so a verify whose session is gone is scored as usual."""
    from ngym.examples import read_example_rollouts
    from ngym.targets import resolve

    folder = resolve("workplace_assistant").folder
    assert folder is not None
    rollouts = read_example_rollouts(folder / "data" / "example_rollouts.jsonl")
    assert rollouts
    row = rollouts[0]
    async with serve_in_process(app_for("workplace_assistant")) as http:
        answer = await RolloutClient(http).post("/verify", {k: v for k, v in row.items() if k != "reward"})
    assert answer.status_code == 200 and answer.json()["reward"] == row["reward"]
    assert not answer.json().get("mask_sample")


async def test_a_request_without_a_session_is_handed_none(counter_http: httpx.AsyncClient) -> None:
    """ngym's counter keeps state only for a seeded session: a tool called without one is its own 409, and the
    answer hands out no session (only a seed does)."""
    rollout = RolloutClient(counter_http)
    unseeded = await rollout.post("/get_counter_value")
    assert unseeded.status_code == 409 and "set-cookie" not in unseeded.headers
    assert rollout.cookie is None
    seeded = await rollout.call("/seed_session", ROW)
    assert seeded == {} and rollout.cookie is not None
