"""A Gymnasium-style NeMo environment (``/reset`` + ``/step``, no seed/verify) driven by ngym's tools over real
HTTP: the profile scenario, ``containerize --run``'s smoke rollout and ``ngym validate``'s replay each send the
recorded trajectory turn by turn, carry the session cookie, sum the steps' rewards and close when advertised."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from nemo_gym.base_resources_server import BaseResourcesServerConfig, BaseVerifyRequest, SimpleResourcesServer
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import Field

from ngym.containerize.smoke import ExampleRollout, drive_rollout
from ngym.profiling.scenario import GymnasiumScenario, RecordedRolloutScenario, RolloutFailed, resolve_scenario
from ngym.rollout.gymnasium import server_post_routes, split_turns
from ngym.rollout.replay_model import environment_items_seen, plan_for
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.server.pipeline.app import build_app
from ngym.testing import serve_in_process

ROW = {"responses_create_params": {"input": [{"role": "user", "content": "play"}]}, "target": 3}


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def assistant(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def call(name: str, call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": "{}", "call_id": call_id}


#: A recorded episode as NeMo's gymnasium_agent stores it: the model's turns with the environment's items between.
RECORDED_OUTPUT = [
    {"type": "reasoning", "summary": []},
    assistant("guess 1"),
    {"type": "message", "role": "user", "content": "higher"},  # the observation of step 1
    call("peek", "c1"),
    {"type": "function_call_output", "call_id": "c1", "output": "3"},  # step 2's tool output
    assistant("guess 3"),
]
RECORDED = {
    "id": "resp_1",
    "created_at": 0.0,
    "model": "m",
    "object": "response",
    "output": RECORDED_OUTPUT,
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


class GuessGame(SimpleResourcesServer):
    """NeMo's GymnasiumServer's shape (hand-built app, its own ``session_state``): guess ``target``. Each step
    scores 0.25 (a wrong guess, a peek) or 1.0 (right); it records what reached it, per session."""

    session_state: dict[str, Any] = Field(default_factory=dict)
    #: (session id, its state) at each /close: after it ngym ends the session, which frees the state too
    closed: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)

    def setup_webserver(self) -> FastAPI:
        app = FastAPI()
        self.setup_session_middleware(app)
        app.post("/reset")(self.reset)
        app.post("/step")(self.step)
        app.post("/close")(self.close)
        return app

    async def reset(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        self.session_state[request.session[SESSION_ID_KEY]] = {"target": body["target"], "turns": [], "ids": []}
        info = {"supports_explicit_close": True, "supports_step_idempotency": True}
        return {"observation": "guess a number", "info": info}

    async def step(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        state = self.session_state[request.session[SESSION_ID_KEY]]  # KeyError (500) without reset's cookie
        output = body["response"]["output"]
        state["turns"].append([item.get("type") for item in output])
        state["ids"].append(body.get("_ng_step_request_id"))
        calls = [item for item in output if item.get("type") == "function_call"]
        if calls:
            outputs = [{"call_id": c["call_id"], "output": str(state["target"])} for c in calls]
            return {"observation": None, "reward": 0.25, "info": {"tool_outputs": outputs}}
        guess = "".join(_text(item) for item in output if item.get("type") == "message")
        if guess == f"guess {state['target']}":
            return {"reward": 1.0, "terminated": True}
        return {"observation": "higher", "reward": 0.25}

    async def close(self, request: Request) -> dict[str, Any]:
        session_id = request.session[SESSION_ID_KEY]
        self.closed.append((session_id, self.session_state[session_id]))
        return {}

    async def verify(self, body: BaseVerifyRequest) -> None:  # type: ignore[override]
        raise NotImplementedError("a Gymnasium-style server scores in /step")


@pytest.fixture
def game() -> GuessGame:
    return GuessGame(config=BaseResourcesServerConfig(name="guess", domain="games"))


@pytest.fixture
def game_url(game: GuessGame) -> Iterator[str]:
    # served as ngym serves it (build_app): a bare NeMo-derived app lets a route's exception propagate, as NeMo's
    # does; the served one answers it as HTTP 500, which is what profile, containerize --run and rollout meet
    with serve_app_in_thread(build_app(game)) as url:
        yield url


class HttpSession:
    """A RolloutSession over httpx carrying the cookie by hand, as ngym profile's Locust session does."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url)
        self.cookie: str | None = None
        self.paths: list[str] = []

    def post(self, path: str, body: Any = None, name: str | None = None) -> Any:
        self.paths.append(path)
        response = self.http.post(path, json=body or {}, headers={"cookie": self.cookie} if self.cookie else {})
        self.http.cookies.clear()
        if "set-cookie" in response.headers:
            self.cookie = response.headers["set-cookie"].split(";", 1)[0]
        if response.status_code >= 400:
            raise RolloutFailed(f"POST {path}: HTTP {response.status_code}")
        return response.json()


def test_recorded_turns_are_the_runs_between_the_environments_items() -> None:
    turns = split_turns(RECORDED_OUTPUT)
    assert [[item["type"] for item in turn] for turn in turns] == [
        ["reasoning", "message"],
        ["function_call"],
        ["message"],
    ]
    plan = plan_for({**ROW, "response": RECORDED}, 0)  # the replay model splits a recording the same way
    assert plan is not None and len(plan.turns) == 3
    # ngym rollout --model replay: the opening observation (before any model item) is not counted
    opening = {"type": "message", "role": "user", "content": "guess a number"}
    assert environment_items_seen([opening]) == 0
    assert environment_items_seen([opening, *RECORDED_OUTPUT[:3]]) == 1


def test_profile_scenario_replays_each_turn_with_the_cookie_and_sums_the_rewards(
    game: GuessGame, game_url: str
) -> None:
    routes = server_post_routes(game_url)
    assert routes is not None and {"/reset", "/step"} <= routes
    scenario = resolve_scenario("guess", routes)
    assert isinstance(scenario, GymnasiumScenario)
    session = HttpSession(game_url)

    result = scenario.run(session, {**ROW, "response": RECORDED, "reward": 1.5})

    assert result == {"reward": 1.5, "terminated": True, "truncated": False}  # 0.25 + 0.25 + 1.0
    assert session.paths == ["/reset", "/step", "/step", "/step", "/close"]
    [(session_id, state)] = game.closed  # the reset's session, carried to every step and to /close
    assert state["turns"] == [["reasoning", "message"], ["function_call"], ["message"]]
    assert len(set(state["ids"])) == 3 and all(isinstance(i, str) and len(i) == 32 for i in state["ids"])
    assert game.session_state == {}  # /close ended the session: ngym freed what the environment kept under its id


def test_a_seed_verify_server_keeps_the_recorded_rollout_scenario() -> None:
    assert isinstance(resolve_scenario("x", {"/seed_session", "/verify", "/reset", "/step"}), RecordedRolloutScenario)
    assert isinstance(resolve_scenario("x", None), RecordedRolloutScenario)


def test_a_failed_step_still_closes_the_episode_and_fails_the_rollout(game: GuessGame, game_url: str) -> None:
    session = HttpSession(game_url)
    bad_turn = {**RECORDED, "output": [{"type": "function_call", "name": "peek"}]}  # no call_id: the step fails
    with pytest.raises(RolloutFailed, match="/step"):
        GymnasiumScenario().run(session, {**ROW, "response": bad_turn})
    assert session.paths == ["/reset", "/step", "/close"]
    assert len(game.closed) == 1


def test_containerize_smoke_rollout_drives_reset_and_step(game_url: str) -> None:
    rollout = drive_rollout(game_url, ExampleRollout(ROW, RECORDED, 1.5))
    assert rollout.protocol == "gymnasium"
    assert rollout.reward == 1.5 and rollout.expected_reward == 1.5
    assert rollout.path == "reset → step ×3 → close"
    assert rollout.verify_response["terminated"] is True


def test_an_episode_the_recording_does_not_finish_is_truncated(game_url: str) -> None:
    short = {**RECORDED, "output": RECORDED_OUTPUT[:2]}  # one wrong guess, then the recording ends
    rollout = drive_rollout(game_url, ExampleRollout(ROW, short, None))
    assert rollout.reward == 0.25
    assert rollout.verify_response["terminated"] is False and rollout.verify_response["truncated"] is True


def test_validate_replays_a_gymnasium_style_environment_in_process(game: GuessGame) -> None:
    from ngym.validation import ValidationReport, _replay

    async def replay(recorded_reward: float) -> ValidationReport:
        report = ValidationReport(target="guess", name="guess")
        async with serve_in_process(game.setup_webserver()) as http:
            rollouts = [{**ROW, "response": RECORDED, "reward": recorded_reward}]
            await _replay(report, http, rollouts, lambda _: None, True)
        return report

    assert asyncio.run(replay(1.5)).ok
    wrong = asyncio.run(replay(1.0))
    assert not wrong.ok and "reward 1.5 != recorded 1.0" in wrong.checks[0].detail


def test_rollout_replay_accepts_a_recording_whose_input_adds_resets_observation() -> None:
    """NeMo's gymnasium_agent records the row's input followed by reset's observation."""
    from ngym.errors import ConfigError
    from ngym.rollout.runner import check_replayable

    observed = [*ROW["responses_create_params"]["input"], {"role": "user", "content": "guess a number"}]
    recording = {"responses_create_params": {"input": observed}, "response": RECORDED}
    check_replayable([ROW], [recording], [])
    other = {"responses_create_params": {"input": [{"role": "user", "content": "another game"}]}}
    with pytest.raises(ConfigError, match="no recording for any row"):
        check_replayable([other], [recording], [])


class QuietGame(GuessGame):
    """The same game, advertising no ``/close``: an episode ends on the server only when a step says so."""

    async def reset(self, request: Request) -> dict[str, Any]:
        answer = await super().reset(request)
        return {**answer, "info": {}}


def _profile(url: str, rows: list[dict[str, Any]], folder: Path) -> subprocess.CompletedProcess[str]:
    data = folder / "example_rollouts.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    command = [sys.executable, "-m", "ngym.cli", "profile", url, "--data", str(data), "--json"]
    options = ["--users", "2", "--duration", "3s"]  # how many rollouts fit in it does not matter: ≥ 1
    env = {**os.environ, "NGYM_DEBUG": ""}
    return subprocess.run([*command, *options], capture_output=True, text=True, timeout=180, env=env)


def test_profile_finds_no_session_left_when_each_episode_ends_on_its_last_step(tmp_path: Path) -> None:
    game = QuietGame(config=BaseResourcesServerConfig(name="quiet", domain="games"))
    with serve_app_in_thread(build_app(game)) as url:
        right = {**RECORDED, "output": [assistant("guess 3")]}  # one step, the episode ends: 1.0
        done = _profile(url, [{**ROW, "response": right, "reward": 1.0}], tmp_path)
        live = httpx.get(f"{url}/health").json()["live_sessions"]
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["rollouts_finished"] > 0 and result["reward_mismatches"] == 0
    assert result["sessions_left_live"] == 0 == live and game.session_state == {}


def test_profile_fails_when_finished_rollouts_leave_their_sessions_live(tmp_path: Path) -> None:
    # room for every session 3 s of a fast machine can leak: the leak, not the full store, is what fails the run
    game = QuietGame(config=BaseResourcesServerConfig(name="quiet", domain="games", max_sessions=1_000_000))
    short = {**RECORDED, "output": RECORDED_OUTPUT[:2]}  # the client stops before the episode ends: truncated
    with serve_app_in_thread(build_app(game)) as url:
        done = _profile(url, [{**ROW, "response": short, "reward": 0.25}], tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["rollouts_failed"] == 0 and result["leaked_sessions"] > 0
    assert result["sessions_left_live"] >= result["rollouts_finished"]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ngym: error: ") and "sessions left live on the server" in last
