"""A shorter road for the commonest route, ``async def tool(self, body: Model) -> Answer``: body bytes straight to
the model, the answer straight to bytes, with every check of FastAPI's own road kept.

FastAPI parses a JSON body into a dict (``StrictJSONRequest.json``), solves the route's dependencies, validates
the dict against the model, then validates and serialises the answer. For a route whose only parameter is one
JSON body model (a request parameter may come too) the same result is had by pydantic's JSON validator reading
the bytes once (``model_validate_json``), which is where most of a tool call's framework time went (issue 22).

It is only a fast road, never a different answer: whenever the request is not the plain case (no JSON
content type, an empty body, anything that may hold a non-finite number, a body the model refuses, FastAPI
telemetry on) the request goes FastAPI's way, so every 400/422 is the one it was (the error comes from that road).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any, cast

from fastapi import params
from fastapi.datastructures import DefaultPlaceholder
from fastapi.routing import APIRoute, serialize_response
from fastapi.utils import is_body_allowed_for_status_code
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


try:  # FastAPI's request telemetry (newer FastAPI): a request it records goes FastAPI's road, which records it
    import fastapi.telemetry as _fastapi_telemetry

    get_telemetry_data: Callable[[], Any] = _fastapi_telemetry.get_telemetry_data
except ImportError:  # pragma: no cover - an older FastAPI (the lower bound is 0.115)
    get_telemetry_data = lambda: None  # noqa: E731


#: The FastAPI this road was written against serialises a declared answer straight to JSON (``dump_json``); with
#: an older one every route keeps FastAPI's road.
_SUPPORTED = "dump_json" in inspect.signature(serialize_response).parameters

_JSON = b"application/json"


def _is_json(scope: Scope) -> bool:
    """The request says its body is JSON (``application/json``, any parameters): FastAPI then parses it as JSON."""
    for key, value in scope["headers"]:
        if key == b"content-type":
            value = bytes(value).lower()
            return value == _JSON or (value.startswith(_JSON) and value[len(_JSON) :].lstrip()[:1] == b";")
    return False


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
    declared = response_field.field_info.annotation if response_field is not None else None
    if not (isinstance(declared, type) and issubclass(declared, BaseModel)):
        declared = None
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
        if plain_dump and declared is not None and type(result) is declared:
            # What FastAPI's response road gives for exactly the declared model (validate, then dump to JSON).
            dumped = cast("BaseModel", result).model_dump_json(by_alias=True)
            return Response(dumped, status_code, media_type="application/json")
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

    return direct
