"""NeMo Gym 0.7.0's own client, checkers and fixtures, run against ngym servers over HTTP.

This file runs inside the NeMo Gym venv (``tools/nemo_venv.sh``), never in ngym's: ngym does not depend on
nemo-gym. ``test_nemo_conformance.py`` starts the ngym servers as processes and runs this script with a JSON
plan on stdin (``{"environments": [{name, url, rollouts, verifier_cases: [...]}]}``); it prints one JSON
report: ``{name: [{"check", "ok", "detail"}, ...]}``. Every NeMo Gym type on the way validates what it sends
and receives, as it would in a NeMo Gym training run:

- ``session``: ``nemo_gym.testing.session_conformance.check_resources_session_contract``. It takes an ASGI
  app and uses Starlette's TestClient, so the app it gets is a proxy that forwards each request to the real
  server over HTTP;
- ``verifier <file>``: ``nemo_gym.verifier_fixture.exercise_verifier_fixture`` with a verifier that POSTs
  each case to the server's ``/verify``: NeMo's own cases files for the environment (its weather cases; its
  LLM-judge HLE cases, whose judge replies it scripts, against a judge-environment instance configured with
  that benchmark's labels and pointed at a scripted judge served here), and the cases ngym ships;
- ``rollout <i> <flow> <paths>``: each recorded rollout driven by NeMo's ``ServerClient`` and its Simple
  Agent's cookie handling: seed (the dataset-row body of an agent's ``/run``, or the Environment Server's
  typed body) → the recorded tool calls → verify (→ close for the typed flow), on plain paths and on
  ``/ng-rollout/<id>/`` paths (NeMo's own prefixing, observability on); the reward must be the recorded one;
- ``verify after close``: a rollout's verify once its session was closed: masked ``session_lost`` where the
  verify reads the session, else scored as recorded; NeMo Gym's ``BaseVerifyResponse`` reads the answer.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import httpx
from nemo_gym.base_resources_server import (
    BaseVerifyResponse,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
)
from nemo_gym.config_types import AggregateMetrics
from nemo_gym.episode_types import EpisodeId, TaskId
from nemo_gym.global_config import OBSERVABILITY_ENABLED_KEY_NAME
from nemo_gym.openai_utils import NeMoGymResponse
from nemo_gym.rollout_correlation import rollout_context
from nemo_gym.server_utils import BaseServerConfig, ServerClient, get_response_json, raise_for_status
from nemo_gym.testing.session_conformance import check_resources_session_contract
from nemo_gym.verifier_fixture import VerifierFixture, exercise_verifier_fixture
from omegaconf import OmegaConf
from pydantic import BaseModel, ConfigDict
from responses_api_agents.simple_agent.app import (
    SimpleAgentRunRequest,
    SimpleAgentVerifyResponse,
    _cookies,
)

RECORDED_KEYS = ("response", "reward")


def proxy_app(base_url: str) -> Any:
    """An ASGI app that forwards every HTTP request to ``base_url`` and sends the answer back unchanged."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        url = base_url + scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        headers = [
            (k.decode(), v.decode()) for k, v in scope["headers"] if k.lower() not in (b"host", b"content-length")
        ]
        async with httpx.AsyncClient(timeout=120) as client:
            answer = await client.request(scope["method"], url, content=body, headers=headers)
        out = [
            (k.encode(), v.encode())
            for k, v in answer.headers.multi_items()
            if k.lower() in ("content-type", "set-cookie")
        ]
        await send({"type": "http.response.start", "status": answer.status_code, "headers": out})
        await send({"type": "http.response.body", "body": answer.content})

    return app


class PassThroughRequest(BaseModel):
    """The fixture's request model: validation is the server's job, so every case reaches ``/verify``."""

    model_config = ConfigDict(extra="allow")


class ScriptedJudge:
    """An OpenAI-Responses judge on a real port that answers every call with the reply set for the current case
    (as NeMo's own HLE fixture scripts its judge's reply from the case's ``fixture_judge_text``)."""

    def __init__(self, port: int) -> None:
        import threading

        import uvicorn
        from fastapi import FastAPI

        self.reply = ""
        self.calls = 0
        app = FastAPI()
        app.post("/v1/responses")(self._respond)
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)

    async def _respond(self, body: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        message = {"id": "judge_msg", "type": "message", "role": "assistant", "status": "completed"}
        message["content"] = [{"type": "output_text", "text": self.reply, "annotations": []}]
        return {
            "id": "judge_resp", "created_at": 0, "model": body.get("model", "judge"), "object": "response",
            "output": [message], "parallel_tool_calls": False, "tool_choice": "none", "tools": [],
        }  # fmt: skip

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


class HTTPVerifier:
    """A VerifierFixture server: ``verify`` is the real server's ``/verify``; an HTTP error raises its body.

    With a scripted judge, the case's ``fixture_judge_text`` becomes the judge's reply first."""

    def __init__(self, url: str, judge: ScriptedJudge | None = None) -> None:
        self.url = url
        self.judge = judge

    async def verify(self, request: BaseModel) -> dict[str, Any]:
        if self.judge is not None:
            self.judge.reply = str(getattr(request, "fixture_judge_text", ""))
        async with httpx.AsyncClient(timeout=120) as client:
            answer = await client.post(f"{self.url}/verify", json=request.model_dump(mode="json"))
        if answer.status_code == 422 and isinstance(answer.json().get("detail"), list):
            # FastAPI's 422 carries pydantic's own errors; written back in pydantic's text form, the fixture's
            # expected_error (e.g. "response\n  Field required") reads as it would in process.
            lines = [
                f"{'.'.join(str(p) for p in e['loc'][1:])}\n  {e['msg']} [type={e['type']}]"
                for e in answer.json()["detail"]
            ]
            raise ValueError(f"HTTP 422: {len(lines)} validation error(s)\n" + "\n".join(lines))
        if answer.status_code >= 400:
            raise ValueError(f"HTTP {answer.status_code}: {answer.text}")
        return answer.json()


def nemo_verifier_cases(name: str) -> list[str]:
    """NeMo Gym's own verifier cases for the environment of that name (``tests/*verifier_cases.jsonl``)."""
    import resources_servers

    return sorted(
        str(f) for p in resources_servers.__path__ for f in (Path(p) / name / "tests").glob("*verifier_cases.jsonl")
    )


def needs_scripted_judge(cases: str) -> bool:
    return any("fixture_judge_text" in line for line in Path(cases).read_text().splitlines())


def server_client(name: str, url: str, observability: bool) -> ServerClient:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    config = {
        name: {"resources_servers": {name: {"host": host, "port": int(port), "entrypoint": "app.py"}}},
        OBSERVABILITY_ENABLED_KEY_NAME: observability,
    }
    return ServerClient(
        head_server_config=BaseServerConfig(host=host, port=int(port)), global_config_dict=OmegaConf.create(config)
    )


def unique_rollout_id(stem: str) -> str:
    # Ends in a letter: "-a<digits>" at the end is EpisodeId's reserved attempt suffix, and a bare hex
    # suffix would hit it now and then ("-a3526449").
    return f"{stem}-{uuid.uuid4().hex[:8]}x"


def function_calls(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in response.get("output", []) if item.get("type") == "function_call"]


async def post(client: ServerClient, name: str, path: str, body: Any, cookies: dict[str, str]) -> Any:
    answer = await client.post(server_name=name, url_path=path, json=body, cookies=cookies)
    return answer


async def run_rollout(env: dict[str, Any], index: int, line: dict[str, Any], flow: str, prefixed: bool) -> str:
    """One recorded rollout through NeMo's client; returns a detail line, raises AssertionError on a mismatch."""
    name, url = env["name"], env["url"]
    client = server_client(name, url, observability=prefixed)
    row = {k: v for k, v in line.items() if k not in RECORDED_KEYS}
    recorded = NeMoGymResponse.model_validate(line["response"])  # the recording is a valid NeMo Gym response
    rollout_id = unique_rollout_id(f"conf-{name.replace('_', '-')}-{index}-{flow}")
    with rollout_context(rollout_id if prefixed else None):
        run_request = SimpleAgentRunRequest.model_validate({**row, "_ng_task_index": index, "_ng_rollout_index": 0})
        if flow == "agent":  # the Simple Agent's /run: seed with the run body, cookies from its answer
            seeded = await post(client, name, "/seed_session", run_request.model_dump(), {})
            await raise_for_status(seeded)
            await get_response_json(seeded)
        else:  # the Environment Server: a typed seed under a caller-chosen id
            episode = EpisodeId(rollout_id=rollout_id)
            typed = ResourcesSeedSessionRequest(
                resources_session_id=rollout_id,
                episode_id=episode,
                task_id=TaskId(taskset=f"{name}:example", task_id=str(index)),
                task_data=row,
            )
            seeded = await post(client, name, "/seed_session", typed.model_dump(mode="json"), {})
            await raise_for_status(seeded)
            seed_answer = ResourcesSeedSessionResponse.model_validate(await get_response_json(seeded))
            assert seed_answer.resources_session_id == rollout_id, "typed seed answered another session"
        cookies = _cookies(seeded)
        assert cookies, "the seed set no session cookie"

        for call in function_calls(line["response"]):
            tool = await post(client, name, f"/{call['name']}", json.loads(call["arguments"]), cookies)
            output = (await tool.content.read()).decode()
            # The agent stores whatever the tool answered as the model-visible output, whatever the status;
            # a 409 means the session cookie was lost on the way, which is what this drive is about.
            assert tool.status != 409, f"tool {call['name']} lost the session: {output[:200]}"
            cookies = {**cookies, **_cookies(tool)}

        verify_body = run_request.model_dump() | {"response": recorded.model_dump(mode="json")}
        verified = await post(client, name, "/verify", verify_body, cookies)
        await raise_for_status(verified)
        result = SimpleAgentVerifyResponse.model_validate(await get_response_json(verified))
        assert result.reward == line["reward"], f"reward {result.reward} != recorded {line['reward']}"

        if flow == "environment":
            close = ResourcesCloseSessionRequest(resources_session_id=rollout_id, episode_id=episode)
            closed = await post(client, name, "/close_session", close.model_dump(mode="json"), cookies)
            await raise_for_status(closed)
            ResourcesCloseSessionResponse.model_validate(await get_response_json(closed))
    return f"reward {result.reward} reproduced"


async def verify_after_close(env: dict[str, Any], index: int, line: dict[str, Any]) -> str:
    """A rollout driven to its end, its session closed, then verified again with the same cookie: the server no
    longer holds the session. NeMo Gym's own BaseVerifyResponse reads the answer: either scored as recorded (a
    verify that does not read the session) or masked with failure_kind session_lost, never an unmasked other
    reward. The detail says which; the ngym side asserts it per environment."""
    name, url = env["name"], env["url"]
    client = server_client(name, url, observability=False)
    row = {k: v for k, v in line.items() if k not in RECORDED_KEYS}
    run_request = SimpleAgentRunRequest.model_validate({**row, "_ng_task_index": index, "_ng_rollout_index": 0})
    seeded = await post(client, name, "/seed_session", run_request.model_dump(), {})
    await raise_for_status(seeded)
    cookies = _cookies(seeded)
    for call in function_calls(line["response"]):
        tool = await post(client, name, f"/{call['name']}", json.loads(call["arguments"]), cookies)
        await tool.content.read()
        cookies = {**cookies, **_cookies(tool)}
    closed = await post(client, name, "/close_session", {}, cookies)
    await raise_for_status(closed)
    verify_body = run_request.model_dump() | {"response": line["response"]}
    verified = await post(client, name, "/verify", verify_body, cookies)
    await raise_for_status(verified)
    result = BaseVerifyResponse.model_validate(await get_response_json(verified))
    if result.mask_sample:
        assert result.failure_kind == "session_lost" and result.failure_reason, result
        return "masked session_lost"
    assert result.failure_kind is None and result.reward == line["reward"], result
    return "scored as recorded"


async def aggregate(env: dict[str, Any], lines: list[dict[str, Any]]) -> str:
    """The recorded rollouts as two repeats of the run: NeMo Gym's own AggregateMetrics model reads the answer,
    with a repeat-level row per repeat and the spread across them (both repeats alike, so no spread)."""
    client = server_client(env["name"], env["url"], observability=False)
    responses = [
        {**{k: v for k, v in line.items() if k != "response"}, "_ng_task_index": i, "_ng_rollout_index": repeat}
        for repeat in (0, 1)
        for i, line in enumerate(lines)
    ]
    answer = await client.post(
        server_name=env["name"], url_path="/aggregate_metrics", json={"verify_responses": responses}
    )
    await raise_for_status(answer)
    metrics = AggregateMetrics.model_validate(await get_response_json(answer))
    mean = sum(line["reward"] for line in lines) / len(lines)
    assert abs(metrics.agent_metrics["mean/reward"] - mean) < 1e-9, metrics.agent_metrics
    rows = metrics.repeat_level_metrics
    assert [row["_ng_rollout_index"] for row in rows] == [0, 1], rows
    assert all(row["sample_count"] == len(lines) and abs(row["mean/reward"] - mean) < 1e-9 for row in rows), rows
    assert abs(metrics.agent_metrics["mean_across_repeats/mean/reward"] - mean) < 1e-9, metrics.agent_metrics
    assert metrics.agent_metrics["std_across_repeats/mean/reward"] == 0.0, metrics.agent_metrics
    return f"mean/reward {metrics.agent_metrics['mean/reward']:.3f} over 2 repeats"


async def check_environment(env: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []

    async def record(check: str, coro: Any) -> None:
        try:
            detail = await coro
            results.append({"check": check, "ok": True, "detail": detail or ""})
        except Exception as exc:  # noqa: BLE001 - every check is reported, the rest still run
            tail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            results.append({"check": check, "ok": False, "detail": tail[-1500:]})

    lines = [json.loads(x) for x in Path(env["rollouts"]).read_text().splitlines() if x.strip()]
    first_row = {k: v for k, v in lines[0].items() if k not in RECORDED_KEYS}

    async def session_contract() -> str:
        seed = ResourcesSeedSessionRequest(
            resources_session_id=f"contract-{uuid.uuid4().hex}",
            episode_id=EpisodeId(rollout_id=unique_rollout_id("contract")),
            task_id=TaskId(taskset=f"{env['name']}:example", task_id="0"),
            task_data=first_row,
        )
        # TestClient is synchronous and runs its own loop: keep it off this one.
        await asyncio.to_thread(check_resources_session_contract, proxy_app(env["url"]), seed, keeps_state=True)
        return "seed, re-seed, close, re-close, close of a never-seeded id, late seeds rejected"

    await record("session", session_contract())

    judged = env.get("scripted_judge")  # {"url": a judge-environment instance, "port": where its judge is}
    judge = ScriptedJudge(judged["port"]) if judged else None
    for cases in [*nemo_verifier_cases(env["name"]), *env.get("verifier_cases", [])]:
        if needs_scripted_judge(cases):
            if judge is None:
                results.append({"check": f"verifier {cases}", "ok": False, "detail": "needs a scripted judge"})
                continue
            url, with_judge = judged["url"], judge
        else:
            url, with_judge = env["url"], None
        fixture = VerifierFixture(
            server_factory=lambda url=url, j=with_judge: HTTPVerifier(url, j),
            request_model=PassThroughRequest,
            cases_path=cases,
        )

        async def exercise(fixture: VerifierFixture = fixture) -> str:
            done = await exercise_verifier_fixture(
                fixture, reward_range=(0.0, 1.0), higher_is_better=True, determinism="unknown"
            )
            return ", ".join(f"{r.kind}:{r.name}" for r in done)

        await record(f"verifier {cases}", exercise())
    if judge is not None:
        judge.stop()

    for index, line in enumerate(lines):
        for flow in ("agent", "environment"):
            for prefixed in (False, True):
                paths = "/ng-rollout/<id>/" if prefixed else "plain"
                await record(f"rollout {index} {flow} {paths}", run_rollout(env, index, line, flow, prefixed))
    await record("verify after close", verify_after_close(env, 0, lines[0]))
    await record("aggregate_metrics", aggregate(env, lines))
    return results


async def main() -> None:
    plan = json.load(sys.stdin)
    report = {env["name"]: await check_environment(env) for env in plan["environments"]}
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
