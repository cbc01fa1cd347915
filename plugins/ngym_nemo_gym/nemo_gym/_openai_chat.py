"""NeMo Gym's Chat Completions types and its minimal OpenAI-compatible client (``NeMoGymAsyncOpenAI``), named by
``nemo_gym.openai_utils`` (where environments import them from)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageToolCall
from openai.types.chat.chat_completion import Choice
from pydantic import BaseModel, ConfigDict, Field

from nemo_gym.server_utils import get_response_json, raise_for_status, request

# HTTP statuses a caller retries (rate limits, overloaded gateways, transient routing and server errors).
RATE_LIMIT_ERROR_CODES = [429, 502, 503, 504, 520]
RETRY_ERROR_CODES = [*RATE_LIMIT_ERROR_CODES, 404, 408, 500]


# ---- chat completions -------------------------------------------------------------------------------


class NeMoGymChatCompletionMessageToolCall(ChatCompletionMessageToolCall):
    pass


class NeMoGymChatCompletionMessage(ChatCompletionMessage):
    pass


class NeMoGymChoice(Choice):
    message: NeMoGymChatCompletionMessage


class NeMoGymChatCompletion(ChatCompletion):
    choices: list[NeMoGymChoice]  # type: ignore[assignment]


class NeMoGymChatCompletionCreateParamsNonStreaming(BaseModel):
    """A ``/v1/chat/completions`` request body (non-streaming); unknown keys are refused, as in NeMo Gym."""

    model_config = ConfigDict(extra="forbid")

    messages: list[dict[str, Any]]
    model: str | None = None
    audio: dict[str, Any] | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, int] | None = None
    logprobs: bool | None = None
    max_completion_tokens: int | None = None
    max_tokens: int | None = None
    metadata: dict[str, str] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    n: int | None = None
    parallel_tool_calls: bool = True
    prediction: dict[str, Any] | None = None
    presence_penalty: float | None = None
    prompt_cache_key: str | None = None
    reasoning_effort: str | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = None
    safety_identifier: str | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    stop: str | list[str] | None = None
    store: bool | None = None
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    tool_choice: str | dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    top_logprobs: int | None = None
    top_p: float | None = None
    user: str | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    web_search_options: dict[str, Any] | None = None
    stream: Literal[False] | None = None
    # Provider extensions OpenAI-SDK clients send at the top level (vLLM template variables, reasoning options).
    chat_template_kwargs: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None


# ---- a minimal OpenAI-compatible client -------------------------------------------------------------


class NeMoGymAsyncOpenAI(BaseModel):
    """POSTs to an OpenAI-compatible endpoint (``base_url`` ending in ``/v1``) through the shared HTTP session.

    Retryable statuses (:data:`RETRY_ERROR_CODES`) are retried up to ``max_http_attempts`` times; the last answer
    is checked with ``raise_for_status``. Each ``create_*`` returns the decoded JSON body.
    """

    base_url: str
    api_key: str = ""
    default_headers: dict[str, str] = Field(default_factory=dict)
    max_http_attempts: int = 3

    async def _post(self, path: str, method: str = "POST", **body: Any) -> Any:
        headers = {**self.default_headers, "Authorization": f"Bearer {self.api_key}"}
        url = f"{self.base_url.rstrip('/')}/{path}"
        for attempt in range(1, self.max_http_attempts + 1):
            response = await request(method, url, headers=headers, json=body or None)
            if response.status not in RETRY_ERROR_CODES or attempt == self.max_http_attempts:
                break
            await asyncio.sleep(0.5 * attempt)
        await raise_for_status(response)
        return await get_response_json(response)

    async def create_models(self) -> Any:
        return await self._post("models", method="GET")

    async def create_chat_completion(self, **kwargs: Any) -> Any:
        return await self._post("chat/completions", **kwargs)

    async def create_completion(self, **kwargs: Any) -> Any:
        return await self._post("completions", **kwargs)

    async def create_response(self, **kwargs: Any) -> Any:
        return await self._post("responses", **kwargs)

    async def create_tokenize(self, **kwargs: Any) -> Any:
        return await self._post("tokenize", **kwargs)
