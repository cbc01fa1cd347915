"""``RequestOnlyRoute``: a route whose endpoint takes only the ``Request`` is called without FastAPI's per-request
parameter machinery.

For every request to an ``APIRoute`` FastAPI opens two exit stacks for dependencies, parses the query string,
the headers and the cookies and matches them against the endpoint's signature, and keeps telemetry context. An
endpoint whose one parameter is the request (``/seed_session`` and ``/close_session``: they read and validate
their bodies themselves) has nothing for those steps to produce; skipping them saves about 6% of the server's
CPU per weather rollout (``bench/bench_inprocess.py``, ``bench/bench_core.py``).

The route stays an ``APIRoute``: path and method matching (405s), the OpenAPI page and the endpoint's response
field are FastAPI's. The endpoint's result is sent as FastAPI sends it: a ``Response`` as is, anything else
serialised by FastAPI's own ``serialize_response`` with the route's response field, as JSON bytes. An exception
reaches the app's exception handlers through Starlette's ``ExceptionMiddleware``, as from any route.
(``tests/unit/test_request_only_route.py`` checks the answers byte for byte against FastAPI's own route.) A route
whose endpoint asks for anything else, or that sets its own status code, response class or body limit, keeps
FastAPI's handling.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi.datastructures import DefaultPlaceholder
from fastapi.routing import serialize_response
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ngym.server.input_errors import StrictJSONRequest, StrictJSONRoute

_SERIALIZES_TO_BYTES = "dump_json" in inspect.signature(serialize_response).parameters


#: What else an endpoint can ask FastAPI for (attributes of its ``Dependant``): any of them, and it is not
#: request-only.
_OTHER_PARAMETERS = (
    "path_params",
    "query_params",
    "header_params",
    "cookie_params",
    "body_params",
    "dependencies",
    "websocket_param_name",
    "http_connection_param_name",
    "response_param_name",
    "background_tasks_param_name",
    "security_scopes_param_name",
)


class RequestOnlyRoute(StrictJSONRoute):
    """An ``APIRoute`` that calls an endpoint taking only the request directly (see the module docstring)."""

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if self._request_only():
            self.app = self._serve

    def _request_only(self) -> bool:
        dependant = self.dependant
        try:
            asks_for_more = any(getattr(dependant, name) for name in _OTHER_PARAMETERS)
        except AttributeError:  # a FastAPI whose Dependant is shaped otherwise: keep its own handling
            return False
        return bool(
            _SERIALIZES_TO_BYTES
            and dependant.request_param_name
            and not asks_for_more
            and inspect.iscoroutinefunction(self.endpoint)
            and self.response_field is not None
            and isinstance(self.response_class, DefaultPlaceholder)
            and not self.status_code
            and getattr(self, "max_body_size", None) is None
        )

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        result = await self.endpoint(StrictJSONRequest(scope, receive, send))
        if not isinstance(result, Response):
            content = await serialize_response(
                field=self.response_field,
                response_content=result,
                include=self.response_model_include,
                exclude=self.response_model_exclude,
                by_alias=self.response_model_by_alias,
                exclude_unset=self.response_model_exclude_unset,
                exclude_defaults=self.response_model_exclude_defaults,
                exclude_none=self.response_model_exclude_none,
                dump_json=True,
            )
            result = Response(content=content, media_type="application/json")
        await result(scope, receive, send)
