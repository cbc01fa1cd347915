"""``nemo_gym.base_responses_api_agent``: an agent server's routes and NeMo 0.7's idempotent agent sessions."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from nemo_gym.base_resources_server import BaseRunRequest, BaseVerifyResponse
from nemo_gym.base_responses_api_agent import (
    AgentCloseSessionResponse,
    AgentSeedSessionRequest,
    AgentSessionState,
    BaseResponsesAPIAgentConfig,
    Body,
    SimpleResponsesAPIAgent,
)
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.rollout_observability import AgentObservationBundle


class EchoAgent(SimpleResponsesAPIAgent):
    config: BaseResponsesAPIAgentConfig
    closed: list[str] = []

    async def responses(self, body: NeMoGymResponseCreateParamsNonStreaming = Body()) -> NeMoGymResponse:
        raise NotImplementedError

    async def run(self, body: BaseRunRequest = Body()) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), response=_response(), reward=0.5)

    async def _seed_agent_session_state(self, body: AgentSeedSessionRequest) -> AgentSessionState:
        return AgentSessionState(request=body)

    async def _close_agent_session_state(self, state: AgentSessionState) -> AgentCloseSessionResponse:
        self.closed.append(state.request.agent_session_id)
        return AgentCloseSessionResponse(
            agent_session_id=state.request.agent_session_id,
            agent_observations=AgentObservationBundle(source="echo"),
        )


def _response() -> dict[str, Any]:
    return {"id": "r", "created_at": 0, "model": "m", "object": "response", "output": [], "parallel_tool_calls": False,
            "tool_choice": "auto", "tools": []}  # fmt: skip


def _client() -> tuple[EchoAgent, TestClient]:
    agent = EchoAgent(config=BaseResponsesAPIAgentConfig(name="echo"), closed=[])
    return agent, TestClient(agent.setup_webserver())


SEED = {
    "agent_session_id": "s1",
    "episode_id": {"rollout_id": "e1"},
    "task_id": {"taskset": "t", "task_id": "1"},
}


def test_run_returns_the_subclass_verify_response() -> None:
    _, client = _client()
    answer = client.post("/run", json={"responses_create_params": {"input": "hi"}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["reward"] == 0.5


def test_seed_is_idempotent_and_a_different_seed_under_the_same_id_is_refused() -> None:
    _, client = _client()
    assert client.post("/v1/agent_sessions", json=SEED).json() == {"agent_session_id": "s1"}
    assert client.post("/v1/agent_sessions", json=SEED).status_code == 200
    other = {**SEED, "task_id": {"taskset": "t", "task_id": "2"}}
    refused = client.post("/v1/agent_sessions", json=other)
    assert refused.status_code == 409 and "bound to another seed" in refused.text


def test_close_returns_the_observations_once_and_the_same_answer_on_retry() -> None:
    agent, client = _client()
    client.post("/v1/agent_sessions", json=SEED)
    close = {"agent_session_id": "s1", "episode_id": {"rollout_id": "e1"}}
    first = client.post("/v1/agent_sessions/close", json=close)
    again = client.post("/v1/agent_sessions/close", json=close)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() and first.json()["agent_observations"]["source"] == "echo"
    assert agent.closed == ["s1"]  # released once
    assert client.post("/v1/agent_sessions", json=SEED).status_code == 409  # closed: no re-seed in the window
    wrong_episode = client.post("/v1/agent_sessions/close", json={**close, "episode_id": {"rollout_id": "e2"}})
    assert wrong_episode.status_code == 409


def test_aggregate_metrics_uses_the_resources_server_aggregation() -> None:
    _, client = _client()
    rows = [{"_ng_task_index": i, "_ng_rollout_index": 0, "reward": float(i % 2)} for i in range(4)]
    answer = client.post("/aggregate_metrics", json={"verify_responses": rows})
    assert answer.status_code == 200, answer.text
    assert answer.json()["agent_metrics"]["mean/reward"] == 0.5
