"""How a route is called and how its answer is written: the route classes of every ngym app.

- ``StrictJSONRoute``: the app's route class. FastAPI reads every body (tools, verify) through
  ``StrictJSONRequest`` (``ngym.server.pipeline.intake``). Routes an environment adds on its own ``APIRouter``
  need ``APIRouter(route_class=StrictJSONRoute)`` to get it.
- The direct body road (``direct_body_handler``), for the commonest route, ``async def tool(self, body: Model) ->
  Answer``: body bytes straight to the model, the answer straight to bytes, with every check of FastAPI's own
  road kept. FastAPI parses a JSON body into a dict, solves the route's dependencies, validates the dict
  against the model, then validates and serialises the answer; for a route whose only parameter is one JSON
  body model (a request parameter may come too) the same result is had by pydantic's JSON validator reading the
  bytes once (``model_validate_json``), which is where most of a tool call's framework time went. It is only a
  fast road, never a different answer: whenever the request is not the plain case (no JSON content type, an
  empty body, anything that may hold a non-finite number, a body the model refuses, FastAPI telemetry on) the
  request goes FastAPI's way, so every 400/422 is the one it was (the error comes from that road).
- ``RequestOnlyRoute``: a route whose endpoint takes only the ``Request`` (``/seed_session``,
  ``/close_session``: they read and validate their bodies themselves) is called without FastAPI's per-request
  parameter machinery (two exit stacks for dependencies, query/header/cookie parsing, telemetry context): about
  6% of the server's CPU per weather rollout (``bench/bench_inprocess.py``, ``bench/bench_core.py``). The route
  stays an ``APIRoute``: path and method matching (405s), the OpenAPI page and the response field are
  FastAPI's. An exception reaches the app's exception handlers through Starlette's ``ExceptionMiddleware``, as
  from any route. A route whose endpoint asks for anything else, or that sets its own status code, response
  class or body limit, keeps FastAPI's handling.
- The response path, written once: ``declared_model_response`` (an answer that is exactly the route's declared
  pydantic model is dumped to JSON in one step, what FastAPI's validate-then-serialise pass would send) and
  ``serialized_response`` (anything else, through FastAPI's own ``serialize_response`` with the route's
  settings). ``/verify``, the direct body road and ``RequestOnlyRoute`` all answer through them.
  (``tests/unit/test_direct_body.py`` and ``tests/unit/test_request_only_route.py`` check the answers byte for
  byte against FastAPI's own route.)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, params
from fastapi.datastructures import DefaultPlaceholder
from fastapi.routing import APIRoute, serialize_response
from fastapi.utils import is_body_allowed_for_status_code
from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ngym.server.pipeline.intake import StrictJSONRequest, may_hold_non_finite

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


try:  # FastAPI's request telemetry (newer FastAPI): a request it records goes FastAPI's road, which records it
    import fastapi.telemetry as _fastapi_telemetry

    get_telemetry_data: Callable[[], Any] = _fastapi_telemetry.get_telemetry_data
except ImportError:  # pragma: no cover - an older FastAPI (the lower bound is 0.115)
    get_telemetry_data = lambda: None  # noqa: E731


#: The FastAPI these roads were written against serialises a declared answer straight to JSON (``dump_json``);
#: with an older one every route keeps FastAPI's road.
_SUPPORTED = "dump_json" in inspect.signature(serialize_response).parameters

_JSON = b"application/json"


def _is_json(scope: Scope) -> bool:
    """The request says its body is JSON (``application/json``, any parameters): FastAPI then parses it as JSON."""
    for key, value in scope["headers"]:
        if key == b"content-type":
            value = bytes(value).lower()
            return value == _JSON or (value.startswith(_JSON) and value[len(_JSON) :].lstrip()[:1] == b";")
    return False


def declared_model(annotation: Any) -> type[BaseModel] | None:
    """``annotation`` when it is a pydantic model class (a route's declared answer), else None."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def declared_model_response(
    result: Any, declared: type[BaseModel] | None, status_code: int = 200, exclude: set[str] | None = None
) -> Response | None:
    """The response for an answer that is exactly the declared model (already validated): what FastAPI's response
    road sends (it dumps, re-validates and serialises it: ~50 us per rollout), in one step. None for any other
    answer (a subclass, a dict, ...): that goes FastAPI's way. ``exclude``: fields left out (that answer, without
    them)."""
    if declared is None or type(result) is not declared:
        return None
    return Response(result.model_dump_json(by_alias=True, exclude=exclude), status_code, media_type="application/json")


async def serialized_response(route: APIRoute, result: Any, status_code: int) -> Response:
    """``result`` as FastAPI's own road sends it: serialised with the route's response field and settings."""
    response_field = route.response_field
    content = await serialize_response(
        field=response_field,
        response_content=result,
        include=route.response_model_include,
        exclude=route.response_model_exclude,
        by_alias=route.response_model_by_alias,
        exclude_unset=route.response_model_exclude_unset,
        exclude_defaults=route.response_model_exclude_defaults,
        exclude_none=route.response_model_exclude_none,
        dump_json=response_field is not None,
    )
    response = (
        Response(content, status_code, media_type="application/json")
        if response_field is not None
        else JSONResponse(content, status_code)
    )
    if not is_body_allowed_for_status_code(status_code):
        response.body = b""
    return response


def direct_body_handler(
    route: APIRoute, fallback: Handler, may_be_non_finite: Callable[[bytes], Any]
) -> Handler | None:
    """A handler for ``route`` that validates its one body model from the bytes, or None when the route is not the
    plain case. ``fallback`` is FastAPI's own handler (taken for any request off the fast road);
    ``may_be_non_finite(raw)`` is true for a body that might hold NaN/Infinity (those go the checked road)."""
    if not _SUPPORTED:
        return None
    dependant = route.dependant
    call = dependant.call
    if call is None or not inspect.iscoroutinefunction(call):
        return None
    if (
        dependant.dependencies
        or dependant.path_params
        or dependant.query_params
        or dependant.header_params
        or dependant.cookie_params
        or len(dependant.body_params) != 1
        or dependant.websocket_param_name
        or dependant.http_connection_param_name
        or dependant.response_param_name
        or dependant.background_tasks_param_name
        or dependant.security_scopes_param_name
        or getattr(route, "_embed_body_fields", True)
    ):
        return None
    field = dependant.body_params[0]
    model = field.field_info.annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)) or isinstance(field.field_info, params.Form):
        return None
    if type(field.field_info) is not params.Body or field.field_info.metadata:
        return None  # constraints or validators on the parameter itself: FastAPI applies those
    if model.model_config.get("strict"):
        return None  # strict models read strings differently from JSON than from a dict
    if not isinstance(route.response_class, DefaultPlaceholder):
        return None
    name = field.name
    request_name = dependant.request_param_name
    status_code = route.status_code or 200
    response_field = route.response_field
    declared = declared_model(response_field.field_info.annotation if response_field is not None else None)
    plain_dump = (
        route.response_model_include is None
        and route.response_model_exclude is None
        and route.response_model_by_alias
        and not route.response_model_exclude_unset
        and not route.response_model_exclude_defaults
        and not route.response_model_exclude_none
    )
    validate_json = model.model_validate_json

    async def direct(request: Request) -> Response:
        raw = await request.body()
        if not raw or not _is_json(request.scope) or may_be_non_finite(raw) or get_telemetry_data() is not None:
            return await fallback(request)
        try:
            body = validate_json(raw)
        except ValidationError:
            return await fallback(request)  # FastAPI's road writes the 400/422 exactly as before
        values: dict[str, Any] = {name: body}
        if request_name is not None:
            values[request_name] = request
        result = await call(**values)
        if isinstance(result, Response):
            return result
        if plain_dump and (response := declared_model_response(result, declared, status_code)) is not None:
            return response
        return await serialized_response(route, result, status_code)

    return direct


class StrictJSONRoute(APIRoute):
    """Route class of every ngym app: FastAPI reads the body through ``StrictJSONRequest``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            # The request FastAPI made, re-classed rather than copied: no second Request per call, and what
            # FastAPI's own exception handling holds is this same object.
            request.__class__ = StrictJSONRequest
            return await handler(request)

        # A tool or verify taking one body model validates it straight from the bytes; anything else (and any
        # request the fast road does not take) goes through FastAPI with StrictJSONRequest as before.
        return direct_body_handler(self, strict, may_hold_non_finite) or strict


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
            _SUPPORTED
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
            result = await serialized_response(self, result, 200)
        await result(scope, receive, send)
