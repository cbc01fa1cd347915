"""Mount the ORS front under ``/ors`` on a server app; the front itself is imported on its first request.

ORS clients reach it two ways:

- under ``/ors`` (``http://HOST:PORT/ors/tools``, ``.../ors/<env_name>/call``): any client that keeps a base
  URL's path;
- at the root, as the ``openreward`` SDK sends them: its HTTP client (aiohttp) drops a base URL's path, so
  ``OPENREWARD_SESSION_URL=http://HOST:PORT/ors/`` makes it request ``http://HOST:PORT/call``. A root request
  is ORS's when its first path segment is an ORS route **and** it carries ORS's ``X-Session-ID`` header or asks
  for an event stream (``/create_session``); NeMo Gym's wire sends neither, so a tool route named like an ORS
  route (``/call``, ``/prompt``) still answers NeMo Gym's agents.

This module imports nothing heavy: building an app pays one middleware, and a request on NeMo Gym's wire pays one
prefix check and one set lookup of its first path segment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ngym.server.fronts.ors.paths import MOUNT_PATH, ROOT_SEGMENTS, is_ors_request, ors_route
from ngym.server.pipeline.ready_answers import ready_answers

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ngym.server.pipeline.resources import SimpleResourcesServer

__all__ = ["MOUNT_PATH", "ROOT_SEGMENTS", "ORSRequests", "is_ors_request", "mount_ors"]


class _LazyFront:
    """The ORS router of one server, built on the first request to it, behind the server's request limits, and
    its plain-ASGI answers (``fast.FastRoutes``), and those of the requests that run no environment code as ready
    bytes for the HTTP protocol (``ngym.server.pipeline.ready_answers.ReadyAnswers``), the others routed by the
    protocol to the front's own handler (``ReadyAnswers.app_for``), from when it is built."""

    def __init__(self, server: SimpleResourcesServer, app: FastAPI) -> None:
        self._server = server
        self._app = app
        self._router: Any = None
        self._fast: Any = None
        # made now, so the protocol finds it on connections opened before the front is built
        self._ready = ready_answers(app)

    @property
    def router(self) -> Any:
        if self._router is None:
            # Imported here: the front (its modules, pydantic models, the tool harvest) is loaded only by servers
            # an ORS client talks to.
            from ngym.server.fronts.ors.fast import FastRoutes
            from ngym.server.fronts.ors.front import build_front
            from ngym.server.pipeline.request_limits import RequestLimitsMiddleware

            config = self._server.config
            front = build_front(self._server, self._app)
            self._fast = FastRoutes(front)
            self._ready.answer = self._fast.ready
            self._ready.direct = self._fast.direct
            self._ready.app_for = self._fast.app_for
            self._router = RequestLimitsMiddleware(
                front.router(),
                max_body_bytes=config.max_request_body_bytes,
                body_timeout_seconds=config.request_body_timeout_seconds,
            )
        return self._router

    @property
    def fast(self) -> Any:
        """``FastRoutes`` of the front (built now when no request has come yet)."""
        if self._fast is None:
            self.router  # noqa: B018 - builds both
        return self._fast

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.router(scope, receive, send)


class ORSRequests:
    """Plain-ASGI middleware, outermost on the app: ORS requests (``/ors/...``, and the SDK's at the root) go
    straight to the front, past the app's session middleware and routes (the front's own calls into the app go
    through them all), those that run no environment code answered at once from ready-made bytes
    (``fast.FastRoutes``); every other request passes on after one prefix check and one set lookup."""

    def __init__(self, app: Any, front: _LazyFront) -> None:
        self.app = app
        self.front = front

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            route = ors_route(scope["path"], scope["headers"])
            if route is not None:
                left = await self.front.fast(route, scope, receive, send)
                if left is not None:  # not a plain case: the router answers (the body, if read, given again)
                    await self.front(_relative(scope, route), left, send)
                return
        await self.app(scope, receive, send)


def _relative(scope: Any, path: str) -> Any:
    return {**scope, "path": path, "raw_path": path.encode(), "root_path": scope.get("root_path", "") + MOUNT_PATH}


def mount_ors(server: SimpleResourcesServer, app: FastAPI) -> None:
    """Serve ``server``'s environment over ORS at ``/ors`` on ``app`` (and the SDK's root requests)."""
    if any(getattr(route, "path", None) in (MOUNT_PATH, MOUNT_PATH + "/{path:path}") for route in app.router.routes):
        return  # the app serves its own /ors: it keeps it
    app.add_middleware(ORSRequests, front=_LazyFront(server, app))
