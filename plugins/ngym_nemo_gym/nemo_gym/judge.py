"""NeMo Gym's LLM-judge helpers: a failed judge *call* is a ``JudgeError``, and verify answers reward 0.0 for it.

``call_judge`` posts to a judge model by name and parses the reply; any failure of the call (no URL, transport,
HTTP status, a body that does not parse as the response model) becomes ``JudgeError``. ngym's verify route turns
a ``JudgeError`` into HTTP 200 with ``reward: 0.0`` and the failure fields; ``judge_failsafe`` does the same for
code that wraps a verify function itself. A reply that arrives but cannot be scored is the environment's business
(a wrong answer), not a judge failure.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from nemo_gym.server_utils import ServerClient, get_response_json, raise_for_status
from ngym import JudgeError as _NgymJudgeError
from ngym.plugin_api import judge_failure_body

__all__ = ["JudgeError", "call_judge", "judge_failsafe", "reraise_judge_errors"]

ResponseT = TypeVar("ResponseT", bound=BaseModel)
T = TypeVar("T")


class JudgeError(_NgymJudgeError):
    """A judge call failed (ngym's ``JudgeError``): verify answers reward 0.0 with the failure fields."""


async def reraise_judge_errors(coro: Awaitable[T]) -> T:
    """Await a judge call; any exception becomes ``JudgeError`` naming the original."""
    try:
        return await coro
    except JudgeError:
        raise
    except Exception as exc:
        raise JudgeError(f"{type(exc).__name__}: {exc}") from exc


async def call_judge(
    server_client: ServerClient, *, server_name: str, url_path: str, json: Any, response_model: type[ResponseT]
) -> ResponseT:
    """POST ``json`` to judge ``server_name`` at ``url_path`` and parse the reply as ``response_model``."""

    async def call() -> ResponseT:
        response = await server_client.post(server_name=server_name, url_path=url_path, json=json)
        await raise_for_status(response)  # before parsing: an error body is reported as the HTTP failure it is
        return response_model.model_validate(await get_response_json(response))

    return await reraise_judge_errors(call())


def judge_failsafe(verify_fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wrap a verify function: a ``JudgeError`` answers reward 0.0 with the failure fields (as ngym's route does)."""

    @functools.wraps(verify_fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await verify_fn(*args, **kwargs)
        except _NgymJudgeError as exc:
            body = kwargs.get("body") or next(
                (a for a in (*kwargs.values(), *args) if isinstance(a, BaseModel) and hasattr(a, "response")), None
            )
            if body is None:
                raise RuntimeError("judge_failsafe: no verify request body among the arguments") from exc
            return JSONResponse(content=jsonable_encoder(judge_failure_body(body, exc)))

    return wrapper
