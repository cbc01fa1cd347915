"""A Gymnasium-style NeMo environment (``/reset`` + ``/step``, no seed/verify) over the ORS (``/ors``) and
OpenEnv (``/openenv``) fronts.

An ORS session (an OpenEnv episode) is a Gymnasium episode: ``create`` resets with the row, a tool call is a step
whose turn is that call, the final-answer tool is a step whose turn is the answer (the environment may answer and
go on), and the step that ends the episode reports the episode's reward (the sum of its steps', as NeMo Gym's
gymnasium agent sums them), the earlier ones none. The same turns replayed as NeMo Gym's agent runs them score the same.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from nemo_gym.base_resources_server import BaseResourcesServerConfig, BaseVerifyRequest, SimpleResourcesServer
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import Field

from ngym.rollout.gymnasium import Recording, drive, episode
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.server.pipeline.app import build_app
from ngym.testing import serve_in_process

PEEK = {"type": "function", "name": "peek", "description": "Peek at the target.", "parameters": {"type": "object"}}
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "play"}], "tools": [PEEK]}, "target": 3}


class GuessGame(SimpleResourcesServer):
    """Guess ``target``: each step scores 0.25 (a wrong guess, a peek) or 1.0 (right, which ends the episode)."""

    session_state: dict[str, Any] = Field(default_factory=dict)
    closed: list[str] = Field(default_factory=list)

    def setup_webserver(self) -> FastAPI:
        app = FastAPI()
        self.setup_session_middleware(app)
        app.post("/reset")(self.reset)
        app.post("/step")(self.step)
        app.post("/close")(self.close)
        return app

    async def reset(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        self.session_state[request.session[SESSION_ID_KEY]] = {"target": body["target"]}
        return {"observation": "guess a number", "info": {"supports_explicit_close": True}}

    async def step(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        state = self.session_state[request.session[SESSION_ID_KEY]]
        output = body["response"]["output"]
        calls = [item for item in output if item.get("type") == "function_call"]
        if calls:
            outputs = [{"call_id": c["call_id"], "output": str(state["target"])} for c in calls]
            return {"observation": None, "reward": 0.25, "info": {"tool_outputs": outputs}}
        guess = "".join(p.get("text", "") for i in output if i.get("type") == "message" for p in i["content"])
        if guess == f"guess {state['target']}":
            return {"observation": "right", "reward": 1.0, "terminated": True}
        return {"observation": "higher", "reward": 0.25}

    async def close(self, request: Request) -> dict[str, Any]:
        self.closed.append(request.session[SESSION_ID_KEY])
        return {}

    async def verify(self, body: BaseVerifyRequest) -> None:  # type: ignore[override]
        raise NotImplementedError("a Gymnasium-style server scores in /step")


def _answer(response: httpx.Response) -> Any:
    data = [line[6:] for line in response.text.split("\r\n") if line.startswith("data: ")]
    return json.loads("".join(data[1:]))


def _message(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


async def test_an_ors_session_is_a_gymnasium_episode_scored_as_nemo_gyms_agent_scores_it() -> None:
    game = GuessGame(config=BaseResourcesServerConfig(name="guess", domain="games"))
    async with serve_in_process(build_app(game)) as http:
        sid = {"x-session-id": (await http.post("/ors/create_session")).text.split("\r\n")[1][6:]}
        created = await http.post("/ors/create", json={"task_spec": ROW}, headers=sid)
        assert created.status_code == 200, created.text
        prompt = (await http.get("/ors/prompt", headers=sid)).json()
        assert "play" in prompt[0]["text"] and "guess a number" in prompt[0]["text"]
        listed = (await http.get("/ors/task_tools", headers=sid)).json()
        assert [t["name"] for t in listed["tools"]] == ["peek", "submit_answer"]  # the row's, not /reset or /step

        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            answer = _answer(await http.post("/ors/call", json={"name": name, "input": arguments}, headers=sid))
            assert answer["ok"] is True, answer
            output: dict[str, Any] = answer["output"]
            return output

        peek = await call("peek", {})
        wrong = await call("submit_answer", {"answer": "guess 1"})
        right = await call("submit_answer", {"answer": "guess 3"})
        await http.post("/ors/delete", headers=sid)

    assert peek["blocks"][0]["text"] == "3" and peek["reward"] is None and peek["finished"] is False
    assert peek["metadata"]["step_reward"] == 0.25
    assert wrong["blocks"][0]["text"] == "higher" and wrong["reward"] is None and wrong["finished"] is False
    assert right["finished"] is True and right["reward"] == 1.5  # 0.25 + 0.25 + 1.0
    assert len(game.closed) == 1  # the episode's /close, as its reset asked

    # The same turns as NeMo Gym's gymnasium agent runs them: the same reward.
    turns = [{"type": "function_call", "name": "peek", "arguments": "{}", "call_id": "c1", "id": "fc_1"}]
    recorded = [*turns, {"type": "function_call_output", "call_id": "c1", "output": "3"}, _message("guess 1")]
    recorded += [{"type": "message", "role": "user", "content": "higher"}, _message("guess 3")]
    again = GuessGame(config=BaseResourcesServerConfig(name="guess", domain="games"))
    response = {"id": "r", "object": "response", "output": recorded, "tools": [PEEK]}
    with serve_app_in_thread(build_app(again)) as url, httpx.Client(base_url=url) as sync:

        def env(path: str, body: dict[str, Any]) -> Any:
            answer = sync.post(path, json=body)
            answer.raise_for_status()
            return answer.json()

        result = drive(episode(ROW), env, Recording(response, {}))
    assert result.reward == right["reward"]


def test_an_openenv_episode_is_a_gymnasium_episode_with_the_same_reward() -> None:
    game = GuessGame(config=BaseResourcesServerConfig(name="guess", domain="games"))
    with TestClient(build_app(game)) as client, client.websocket_connect("/openenv/ws") as socket:

        def send(kind: str, data: dict[str, Any]) -> dict[str, Any]:
            socket.send_json({"type": kind, "data": data})
            answer: dict[str, Any] = socket.receive_json()
            assert answer["type"] == "observation", answer
            return answer["data"]

        reset = send("reset", {"row": ROW})
        assert reset["observation"]["observation"] == "guess a number"
        assert [t["name"] for t in reset["observation"]["available_tools"]] == ["peek"]
        peek = send("step", {"tool_name": "peek", "arguments": {}})
        wrong = send("step", {"message": "guess 1"})
        right = send("step", {"message": "guess 3"})
    assert peek["observation"]["result"] == "3" and peek["reward"] is None and peek["done"] is False
    assert wrong["observation"]["result"] == "higher" and wrong["reward"] is None and wrong["done"] is False
    assert right["done"] is True and right["reward"] == 1.5  # the episode's reward, as NeMo Gym's agent sums it
    assert len(game.closed) == 1
