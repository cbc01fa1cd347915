"""``nemo_gym.base_responses_api_model``: a model server validates requests strictly and serves non-streaming."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from nemo_gym.base_responses_api_model import (
    BaseResponsesAPIModelConfig,
    Body,
    SimpleResponsesAPIModel,
    observability_enabled_from_config,
)
from nemo_gym.openai_utils import (
    NeMoGymChatCompletion,
    NeMoGymChatCompletionCreateParamsNonStreaming,
    NeMoGymResponse,
    NeMoGymResponseCreateParamsNonStreaming,
)


class EchoModel(SimpleResponsesAPIModel):
    config: BaseResponsesAPIModelConfig

    async def responses(self, body: NeMoGymResponseCreateParamsNonStreaming = Body()) -> NeMoGymResponse:
        text = body.input if isinstance(body.input, str) else "?"
        return NeMoGymResponse.model_validate(_response(text))

    async def chat_completions(
        self, body: NeMoGymChatCompletionCreateParamsNonStreaming = Body()
    ) -> NeMoGymChatCompletion:
        raise NotImplementedError


def _response(text: str) -> dict[str, Any]:
    message = {"id": "m", "type": "message", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
    return {"id": "r", "created_at": 0, "model": "echo", "object": "response", "output": [message],
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": []}  # fmt: skip


def _client() -> TestClient:
    return TestClient(EchoModel(config=BaseResponsesAPIModelConfig(name="echo")).setup_webserver())


def test_responses_are_served_by_the_subclass() -> None:
    answer = _client().post("/v1/responses", json={"input": "hello"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"][0]["content"][0]["text"] == "hello"


def test_a_bad_body_is_fastapis_422_and_streaming_a_clear_400() -> None:
    client = _client()
    bad = client.post("/v1/responses", json={"input": "x", "temperature": "hot"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body", "temperature"]
    streaming = client.post("/v1/responses", json={"input": "x", "stream": True})
    assert streaming.status_code == 400 and "stream" in streaming.json()["detail"]


def test_observability_flag_is_read_from_the_global_config() -> None:
    assert observability_enabled_from_config({"observability_enabled": True}) is True
    assert observability_enabled_from_config({}) is False
