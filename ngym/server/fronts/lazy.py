"""An ASGI app that builds the real one on its first request: a front's import cost is paid only by its users."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ASGIApp = Callable[[Any, Any, Any], Any]


class LazyApp:
    """Calls ``build()`` once, on the first request (HTTP or WebSocket), and hands every request to its result."""

    def __init__(self, build: Callable[[], ASGIApp]) -> None:
        self._build = build
        self._app: ASGIApp | None = None

    @property
    def app(self) -> ASGIApp:
        """The built app (built now when no request has come yet)."""
        if self._app is None:
            self._app = self._build()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)
