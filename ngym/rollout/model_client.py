"""The policy model, spoken to with the OpenAI Responses API through the ``openai`` package.

Any server that answers ``POST /v1/responses`` works: vLLM, NIM, OpenAI, ``ngym replay-model``. Retries on
429/5xx/timeouts are the ``openai`` client's own (exponential back-off, ``Retry-After`` honoured); each
call reports how many it took (``retries_taken``), so retries show up in the trajectory's metadata and in
the log (logger ``openai._base_client`` at INFO: "Retrying request ...").

``openai`` is imported when a ``ModelClient`` is created, never at server start-up.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import Any

import openai
from openai import AsyncOpenAI
from pydantic import ValidationError

from ngym.rollout.errors import ModelError
from ngym.server.protocol import Response

log = logging.getLogger("ngym.rollout")

#: keys of ``responses_create_params`` the agent controls itself
_AGENT_KEYS = {"input", "stream"}


@dataclass
class ModelReply:
    """One model call: the Response as the server sent it (a dict) and how many retries it took."""

    response: dict[str, Any]
    retries: int


class ModelClient:
    """A thin async wrapper over ``AsyncOpenAI().responses.create``."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 4,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.max_retries = max_retries
        # Local servers (vLLM, replay) take any key; the openai client insists on one being set.
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key or "ngym-no-key", timeout=timeout, max_retries=max_retries
        )
        self._known = set(inspect.signature(self._client.responses.create).parameters) - {"self"}
        self.list_error: str | None = None  #: why ``resolve_model`` found no model, for ``no_model_line``

    async def resolve_model(self) -> str | None:
        """``--model`` if given, else the first model the server lists (vLLM serves one), else None."""
        if self.model:
            return self.model
        try:
            page = await self._client.models.list()
        except Exception as exc:  # noqa: BLE001 - a server without /v1/models: rows must name the model
            log.info("could not list models at %s (%r); rows must name their model", self.base_url, exc)
            self.list_error = _list_failure(exc)
            return None
        ids = [m.id for m in page.data]
        self.model = ids[0] if ids else None
        if self.model is None:
            self.list_error = "it lists no model"
        return self.model

    def no_model_line(self) -> str:
        """The one line for a model server whose model name could not be found (after ``resolve_model``)."""
        url = f"{self.base_url.rstrip('/')}/models"
        why = self.list_error or "it lists no model"
        return (
            f"--model-url {self.base_url}: GET {url} found no model ({why}): is it an OpenAI-compatible model "
            "server (vLLM, NIM, OpenAI; its base URL usually ends in /v1)? If it serves the Responses API without "
            "/models, give --model NAME"
        )

    async def create(self, params: dict[str, Any], input_items: list[Any]) -> ModelReply:
        """``POST /responses`` with the row's parameters and the accumulated ``input``."""
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in params.items():
            if key in _AGENT_KEYS or value is None:
                continue
            (kwargs if key in self._known else extra)[key] = value
        if self.model:
            kwargs["model"] = self.model
        if "model" not in kwargs:
            raise ModelError("no model name: pass --model, or put `model` in responses_create_params")
        if extra:
            kwargs["extra_body"] = extra
        try:
            raw = await self._client.responses.with_raw_response.create(input=input_items, **kwargs)
        except openai.APIStatusError as exc:
            # the client retries 408/409/429/5xx only: a 400 is the server's final word, said as such
            retried = exc.status_code in (408, 409, 429) or exc.status_code >= 500
            after = " after retries" if retried else ""
            if exc.status_code in (404, 405, 501):  # no such route, method, or POST at all (a static file server)
                raise ModelError(
                    f"model server answered HTTP {exc.status_code}: {_short(exc)} (no POST "
                    f"{self.base_url.rstrip('/')}/responses there: not an OpenAI Responses API server, or --model-url "
                    "lacks its /v1)"
                ) from exc
            raise ModelError(f"model server answered HTTP {exc.status_code}{after}: {_short(exc)}") from exc
        except openai.APITimeoutError as exc:
            raise ModelError(f"model server timed out after {self.max_retries} retries ({self.base_url})") from exc
        except openai.APIConnectionError as exc:
            raise ModelError(f"cannot reach the model server at {self.base_url}: {exc}") from exc
        if raw.retries_taken:
            log.info(
                "model call succeeded after %d retr%s", raw.retries_taken, "y" if raw.retries_taken == 1 else "ies"
            )
        try:
            data = raw.http_response.json()
            Response.model_validate(data)
        except (ValueError, ValidationError) as exc:
            raise ModelError(f"the model server's answer is not a Responses object: {str(exc)[:300]}") from exc
        return ModelReply(response=data, retries=raw.retries_taken)

    async def close(self) -> None:
        await self._client.close()


def _list_failure(exc: Exception) -> str:
    """Why listing the models failed, in a few words (no /models there, not JSON, nothing listening)."""
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: no /models there"
    if isinstance(exc, openai.APIConnectionError):
        return "nothing answers there"
    if isinstance(exc, ValueError | ValidationError | TypeError | AttributeError):
        return "its answer is not a model list"
    return type(exc).__name__


def _short(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    text = str(body) if body is not None else str(exc)
    return " ".join(text.split())[:300]  # one line, whatever the server sent (an HTML error page, say)
