"""NeMo Gym's model servers (``nemo_gym.base_responses_api_model``), on ngym.

A model server fronts a policy or judge model: ``POST /v1/responses`` (OpenAI Responses API) and
``POST /v1/chat/completions``, each validated strictly against NeMo's request types (a bad body is FastAPI's 422)
and handed to the subclass's ``responses`` / ``chat_completions``. NeMo Gym's own model servers
(``responses_api_models/<name>``, in its wheel) subclass ``SimpleResponsesAPIModel``.

What differs from NeMo Gym: only non-streaming requests are served (``stream: true`` is a 400 saying so); there
is no Anthropic ``/v1/messages`` mapping, and no model-call or training-token capture (``observability_enabled``
is read by ``observability_enabled_from_config`` but records nothing here).
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from fastapi import Body, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nemo_gym.config_types import BaseRunServerInstanceConfig
from nemo_gym.global_config import OBSERVABILITY_ENABLED_KEY_NAME
from nemo_gym.openai_utils import (
    NeMoGymChatCompletion,
    NeMoGymChatCompletionCreateParamsNonStreaming,
    NeMoGymResponse,
    NeMoGymResponseCreateParamsNonStreaming,
)
from nemo_gym.server_utils import BaseServer, SimpleServer

__all__ = [
    "BaseResponsesAPIModel",
    "BaseResponsesAPIModelConfig",
    "Body",
    "NonGeneratingRequest",
    "SimpleResponsesAPIModel",
    "observability_enabled_from_config",
]


class NonGeneratingRequest(BaseModel):
    """A route of a model server that never returns model-generated content (a health or metadata route)."""

    model_config = ConfigDict(extra="forbid")

    method: str
    path: str

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class BaseResponsesAPIModelConfig(BaseRunServerInstanceConfig):
    token_id_capture_non_generating_requests: list[NonGeneratingRequest] = Field(default_factory=list)


class BaseResponsesAPIModel(BaseServer):
    config: BaseResponsesAPIModelConfig


def _validated(model: type[BaseModel], body: dict[str, Any]) -> Any:
    """``body`` as ``model``, a failure reported as FastAPI's own 422 (locations under ``body``)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def _refuse_streaming(body: Mapping[str, Any]) -> None:
    if body.get("stream") is True:
        raise HTTPException(400, "streaming (stream: true) is not served by ngym's NeMo Gym model servers")


class SimpleResponsesAPIModel(BaseResponsesAPIModel, SimpleServer):
    """A model server: subclasses write ``responses`` and ``chat_completions``."""

    #: Routes the subclass adds that never return generated content (NeMo uses them for token capture).
    non_generating_model_routes: ClassVar[frozenset[tuple[str, str]]] = frozenset()

    def setup_webserver(self) -> FastAPI:
        app = FastAPI(title=self.config.name or type(self).__name__)
        app.post("/v1/chat/completions")(self.chat_completions_dispatch)
        app.post("/v1/responses")(self.responses_dispatch)
        self.setup_liveness(app)
        return app

    @abstractmethod
    async def chat_completions(
        self, body: NeMoGymChatCompletionCreateParamsNonStreaming = Body()
    ) -> NeMoGymChatCompletion:
        """One chat completion."""

    @abstractmethod
    async def responses(self, body: NeMoGymResponseCreateParamsNonStreaming = Body()) -> NeMoGymResponse:
        """One Responses API call."""

    async def responses_dispatch(self, request: Request, body: dict[str, Any] = Body()) -> Any:
        """``POST /v1/responses``: the body validated strictly, then the subclass's ``responses``."""
        _refuse_streaming(body)
        params = _validated(NeMoGymResponseCreateParamsNonStreaming, body)
        return await self._call(self.responses, request, params)

    async def chat_completions_dispatch(self, request: Request, body: dict[str, Any] = Body()) -> Any:
        """``POST /v1/chat/completions``: the body validated strictly, then the subclass's ``chat_completions``."""
        _refuse_streaming(body)
        params = _validated(NeMoGymChatCompletionCreateParamsNonStreaming, body)
        return await self._call(self.chat_completions, request, params)

    @staticmethod
    async def _call(method: Any, request: Request, params: Any) -> Any:
        # Servers declare either (body) or (request, body): pass the request to those that take it.
        if "request" in inspect.signature(method).parameters:
            return await method(request=request, body=params)
        return await method(body=params)


def observability_enabled_from_config(global_config_dict: Any) -> bool:
    """The run-wide ``observability_enabled`` flag of a global config (``False`` when absent)."""
    if not isinstance(global_config_dict, Mapping):
        return False
    return bool(global_config_dict.get(OBSERVABILITY_ENABLED_KEY_NAME, False))
