"""Which rollout a request belongs to: NeMo Gym's ``/ng-rollout/<id>/`` path prefix as a context variable."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

from nemo_gym.global_config import (
    ATTEMPT_INDEX_KEY_NAME,
    ROLLOUT_ID_KEY_NAME,
    ROLLOUT_INDEX_KEY_NAME,
    TASK_INDEX_KEY_NAME,
)
from ngym.plugin_api import strip_rollout_prefix

__all__ = [
    "ROLLOUT_ID_PATTERN",
    "RolloutContextMiddleware",
    "current_rollout_id",
    "maybe_rollout_id_from_run_body",
    "rollout_context",
]

#: What an explicit rollout id may look like: it becomes a URL path segment and a file-name part.
ROLLOUT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

_rollout_id: ContextVar[str | None] = ContextVar("nemo_gym_rollout_id", default=None)


def maybe_rollout_id_from_run_body(body: BaseModel | Mapping[str, Any] | None) -> str | None:
    """The rollout id a ``/run`` body names: its ``_ng_rollout_id``, else ``"<task index>-<rollout index>"``;
    ``-a<n>`` appended for a re-dispatch attempt ``n > 0``; ``None`` when the body carries neither.

    A malformed explicit id is refused rather than cleaned up: a rewritten id could not be looked up by the caller.
    """
    if not isinstance(body, BaseModel | Mapping):
        return None

    def field(key: str) -> Any:
        if isinstance(body, Mapping):
            return body.get(key)
        if key == ROLLOUT_ID_KEY_NAME and hasattr(body, "capture_rollout_id"):
            return body.capture_rollout_id
        return getattr(body, key, None)

    explicit = field(ROLLOUT_ID_KEY_NAME)
    if explicit is not None:
        if not (isinstance(explicit, str) and ROLLOUT_ID_PATTERN.match(explicit)):
            raise ValueError(
                f"{ROLLOUT_ID_KEY_NAME} must be letters, digits, dots, dashes or underscores, starting with a "
                f"letter or digit; got {explicit!r}"
            )
        rollout_id = explicit
    else:
        task, rollout = field(TASK_INDEX_KEY_NAME), field(ROLLOUT_INDEX_KEY_NAME)
        if task is None or rollout is None:
            return None
        rollout_id = f"{task}-{rollout}"
    attempt = field(ATTEMPT_INDEX_KEY_NAME)
    if attempt is not None and int(attempt) > 0:
        rollout_id = f"{rollout_id}-a{int(attempt)}"
    return rollout_id


def current_rollout_id() -> str | None:
    """The rollout id of the request (or :func:`rollout_context`) being served, if any."""
    return _rollout_id.get()


@contextlib.contextmanager
def rollout_context(rollout_id: str | None) -> Iterator[None]:
    token = _rollout_id.set(rollout_id)
    try:
        yield
    finally:
        _rollout_id.reset(token)


class RolloutContextMiddleware:
    """Strips ``/ng-rollout/<id>/`` (as ngym's own middleware does) and binds ``<id>`` for the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        strip_rollout_prefix(scope)
        with rollout_context(scope.get("ngym.rollout_id")):
            await self.app(scope, receive, send)
