"""Which rollout a request belongs to: NeMo Gym's ``/ng-rollout/<id>/`` path prefix as a context variable."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

from ngym.server.middleware import strip_rollout_prefix

__all__ = ["RolloutContextMiddleware", "current_rollout_id", "rollout_context"]

_rollout_id: ContextVar[str | None] = ContextVar("nemo_gym_rollout_id", default=None)


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
