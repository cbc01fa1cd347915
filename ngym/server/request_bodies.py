"""Request bodies as every standard route reads them: strict JSON, 400 when it is not JSON, 422 with field errors
(non-finite numbers included).

Public through ``ngym.plugin_api`` (``read_json``, ``validate_body``), so a plugin's own routes answer bad input
exactly as ngym's do.
"""

from __future__ import annotations

import functools
import typing
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from ngym.server.input_errors import parse_json, reject_non_finite
from ngym.server.protocol.bodies import BaseSeedSessionRequest, ResourcesSeedSessionRequest

if TYPE_CHECKING:
    from ngym.server.resources import SimpleResourcesServer

M = TypeVar("M", bound=BaseModel)


def parse_body(raw: bytes) -> Any:
    """The JSON value of a request body (``{}`` when empty); HTTP 400 naming the problem when it is not JSON."""
    if not raw.strip():
        return {}
    try:
        data = parse_json(raw)
    except ValueError as exc:
        raise HTTPException(400, f"request body is not valid JSON: {exc}") from None
    reject_non_finite(raw, data)  # NaN, Infinity, 1e400: a 422 naming where, never a 500 (issue 25)
    return data


async def read_json(request: Request) -> Any:
    """The request's body parsed as ``parse_body`` does (Starlette caches the bytes: reading twice is cheap)."""
    return parse_body(await request.body())


def validate_body(model: type[M], data: Any) -> M:
    """``data`` as ``model``; a mismatch is FastAPI's 422 with field errors (``RequestValidationError``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False)) from None


def validate_json(model: type[M], raw: bytes) -> M:
    """Validate straight from bytes (pydantic's own JSON parser: no intermediate dict); 400 / 422 as above."""
    reject_non_finite(raw)
    try:
        return model.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if errors and errors[0]["type"] == "json_invalid":
            raise HTTPException(400, f"request body is not valid JSON: {errors[0]['msg']}") from None
        raise RequestValidationError(errors) from None


@functools.cache
def seed_body_model(cls: type[SimpleResourcesServer]) -> type[BaseModel]:
    """The row model ``cls.seed_session`` annotates its ``body`` with (``BaseSeedSessionRequest`` by default)."""
    hints = typing.get_type_hints(cls.seed_session)
    annotation = hints.get("body", BaseSeedSessionRequest)
    # NeMo Gym's own examples annotate `RowModel | ResourcesSeedSessionRequest`: take the row model.
    for candidate in typing.get_args(annotation) or (annotation,):
        is_model = isinstance(candidate, type) and issubclass(candidate, BaseModel)
        if is_model and candidate is not ResourcesSeedSessionRequest:
            return cast("type[BaseModel]", candidate)
    return BaseSeedSessionRequest
