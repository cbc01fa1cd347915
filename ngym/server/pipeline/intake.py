"""Body intake: how every route reads a request body. Malformed input becomes a clear 4xx, never a 500: one JSON
parser for every route, strict JSON (400 when it is not JSON), 422 with field errors, and bounded 422 bodies.

- ``parse_json``: pydantic-core's parser (the one ``model_validate_json`` uses), which rejects nesting deeper
  than 200 levels (``json.loads`` raises ``RecursionError`` at ~1000, an exception nothing maps to a 4xx). A lone
  surrogate escape (``"\\ud800"``: valid JSON syntax, not text) becomes U+FFFD, as a lenient UTF-16 decoder
  would: the body is model output relayed by the client, NeMo Gym accepts it, and a rollout must not be lost
  to one broken character (nor may the echo of it crash the response encoder, which it did when let through).
- ``StrictJSONRequest``: a request whose ``json()`` is ``parse_json``; the app's route class
  (``ngym.server.pipeline.routing.StrictJSONRoute``) makes every request one, so a body FastAPI rejects is its
  usual 422 ``json_invalid``.
- ``validation_error_handler``: FastAPI's 422 with each error's ``input`` cut to a short preview, so a 50 MB
  body that fails validation is not sent back whole (nor anything that is not valid UTF-8).
- ``reject_non_finite``: ``NaN``, ``Infinity``, ``-Infinity`` (not JSON, but parsers accept them) and numbers
  beyond a double's range (``1e400``: JSON syntax, read as infinity) are a 422 ``finite_number`` naming where
  they are. Let through, they reached the 422 handler (which cannot serialise them: a 500 a client retries)
  or an environment and its responses.
- ``parse_body``, ``read_json``, ``validate_body``, ``validate_json``: a body as the standard routes read it;
  public through ``ngym.plugin_api`` (``read_json``, ``validate_body``), so a plugin's own routes answer bad
  input exactly as ngym's do. ``seed_body_model``: the row model a server's ``seed_session`` takes.
"""

from __future__ import annotations

import functools
import json
import math
import re
import typing
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pydantic_core
from fastapi import HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from ngym.server.protocol.bodies import BaseSeedSessionRequest, ResourcesSeedSessionRequest

if TYPE_CHECKING:
    from ngym.server.pipeline.resources import SimpleResourcesServer

M = TypeVar("M", bound=BaseModel)

#: Longest string kept in a 422's ``input``; longer ones end in "…".
PREVIEW_CHARS = 200
#: At most this many items of each list or object, and this much nesting, in a 422's ``input``.
PREVIEW_ITEMS = 10
PREVIEW_DEPTH = 3
#: At most this many errors in one 422 (a list of a million bad items fails a million times).
MAX_ERRORS = 50

_WHERE = re.compile(r"at line (\d+) column (\d+)")


#: An escaped backslash (skipped), a valid surrogate pair (kept), or a lone surrogate escape (replaced).
_SURROGATE_ESCAPE = re.compile(
    rb"(\\\\)|(\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)


def _replace_lone_surrogates(raw: bytes) -> bytes:
    return _SURROGATE_ESCAPE.sub(lambda m: m.group(1) or m.group(2) or rb"\ufffd", raw)


def parse_json(raw: bytes | str) -> Any:
    """Parse a request body (lone surrogate escapes read as U+FFFD); ``json.JSONDecodeError`` (a ``ValueError``)
    with a readable message if it is not JSON or nests too deep."""
    try:
        return pydantic_core.from_json(raw)
    except ValueError as exc:
        message = str(exc)
        if "surrogate" in message or "hex escape" in message:
            # the rare path: only a body pydantic-core refused is scanned for lone surrogates
            data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
            repaired = _replace_lone_surrogates(data)
            if repaired != data:
                return parse_json(repaired)
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        reason = _WHERE.sub("", message).strip()
        raise json.JSONDecodeError(reason, text, _offset(text, message)) from None


def _offset(text: str, message: str) -> int:
    """The character offset pydantic-core's "at line L column C" points at (JSONDecodeError wants one)."""
    where = _WHERE.search(message)
    if where is None:
        return 0
    line, column = int(where.group(1)), int(where.group(2))
    start = sum(len(before) + 1 for before in text.split("\n", line - 1)[: line - 1])
    return min(start + max(column - 1, 0), len(text))


#: Each byte as its class for ``may_hold_non_finite``: a digit is "0", an exponent mark "e", "+" stays, the rest "x".
_NUMBER_CLASSES = bytes(
    ord("0") if chr(c).isdigit() and c < 128 else ord("e") if c in b"eE" else c if c == ord("+") else ord("x")
    for c in range(256)
)
#: A number whose exponent has at most 2 digits overflows a double only with 210 or more digits before it.
_LONG_DIGITS = b"0" * 200
#: What may stand before a JSON value (whitespace aside): a key's colon, an array's bracket, a comma.
_BEFORE_VALUE = frozenset(b":[,")
_WHITESPACE = frozenset(b" \t\n\r")
_NUMBER_BYTES = frozenset(b"0123456789.")
#: Candidates checked one by one before the check gives up and says maybe (a body made of them stays linear).
_MAX_CANDIDATES = 64


def _starts_a_value(raw: bytes, start: int) -> bool:
    """Whether the token starting at ``start`` (after an optional minus) stands where JSON puts a value: only
    whitespace between it and a ``:``, ``[``, ``,`` or the start of the body. A hex id's ``1e986`` does not."""
    index = start - 1
    if index >= 0 and raw[index] == 0x2D:  # "-"
        index -= 1
    while index >= 0 and raw[index] in _WHITESPACE:
        index -= 1
    return index < 0 or raw[index] in _BEFORE_VALUE


def _number_start(raw: bytes, mark: int) -> int:
    """Where the number whose exponent mark is at ``mark`` begins (its digits and point, before the mark)."""
    index = mark
    while index > 0 and raw[index - 1] in _NUMBER_BYTES:
        index -= 1
    return index


def may_hold_non_finite(raw: bytes) -> bool:
    """False when ``raw`` cannot hold a non-finite number; true may be a false alarm (the exact check walks the
    parsed body). A non-finite number is a ``NaN``/``Infinity`` token or a number beyond a double's range (an
    exponent of 3 digits or more, or 210 digits before a shorter one), and it stands where JSON puts a value.

    Substring searches over one translated copy, several times quicker than a regular expression at every byte
    (~15-40 us for a verify body, on every request). Each candidate is then checked to stand where a value
    does: NeMo Gym's ids (``resp_9d1e9866...``) hold an ``e`` and three digits in most rollouts, and without
    this check such a body was walked in Python and kept off the direct road (issue 22: a third of the server's
    time on ``equivalence_rule``)."""
    candidates = 0
    for token in (b"NaN", b"Infinity"):
        at = raw.find(token)
        while at != -1:
            if _starts_a_value(raw, at):
                return True
            candidates += 1
            if candidates > _MAX_CANDIDATES:
                return True
            at = raw.find(token, at + 1)
    classes = raw.translate(_NUMBER_CLASSES)
    if _LONG_DIGITS in classes:
        return True
    for mark in (b"e000", b"e+000"):
        at = classes.find(mark)
        while at != -1:
            if _starts_a_value(raw, _number_start(raw, at)):
                return True
            candidates += 1
            if candidates > _MAX_CANDIDATES:
                return True
            at = classes.find(mark, at + 1)
    return False


_NOT_PARSED = object()


def non_finite_errors(raw: bytes, data: Any = _NOT_PARSED) -> list[dict[str, Any]]:
    """422 errors (``finite_number``, with their ``loc``) for each non-finite number in the JSON body ``raw``
    (``data``: its parsed value, when already parsed); at most ``MAX_ERRORS``. Nothing for a body that is not
    JSON (its own error reports that)."""
    if not may_hold_non_finite(raw):
        return []
    if data is _NOT_PARSED:
        try:
            data = parse_json(raw)
        except ValueError:
            return []
    errors: list[dict[str, Any]] = []
    stack: list[tuple[tuple[str | int, ...], Any]] = [(("body",), data)]
    while stack and len(errors) < MAX_ERRORS:
        loc, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            errors.append(
                {
                    "type": "finite_number",
                    "loc": list(loc),
                    "msg": "Input should be a finite number (JSON has no NaN or Infinity; a number beyond "
                    "±1.8e308 is out of range)",
                    "input": _number_text(value),
                }
            )
        elif isinstance(value, dict):
            stack += [((*loc, key), item) for key, item in reversed(value.items())]
        elif isinstance(value, list):
            stack += [((*loc, index), item) for index, item in reversed(list(enumerate(value)))]
    return errors


def reject_non_finite(raw: bytes, data: Any = _NOT_PARSED) -> None:
    """A 422 (``{"detail": [errors]}``, the shape of every validation error) if the body holds a non-finite
    number: see :func:`non_finite_errors`."""
    errors = non_finite_errors(raw, data)
    if errors:
        raise HTTPException(422, detail=errors)


def _number_text(value: float) -> str:
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


class StrictJSONRequest(Request):
    """A request whose ``json()`` is ``parse_json``, non-finite numbers refused (422)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            raw = await self.body()
            data = parse_json(raw)
            # An HTTPException, which FastAPI lets through from here (any other exception would become its 400)
            reject_non_finite(raw, data)
            self._json = data
        return self._json


def preview(value: Any, depth: int = 0) -> Any:
    """A small copy of ``value`` for an error message: long strings cut, long containers shortened, deep
    structures elided, text made valid UTF-8. Costs O(what is kept), whatever the size of ``value``."""
    if isinstance(value, str):
        cut = value if len(value) <= PREVIEW_CHARS else f"{value[:PREVIEW_CHARS]}… ({len(value)} characters)"
        return cut.encode("utf-8", "replace").decode()
    if isinstance(value, bytes):
        return preview(value[: PREVIEW_CHARS * 4].decode("utf-8", "replace"), depth)
    if isinstance(value, dict | list | tuple):
        if depth >= PREVIEW_DEPTH:
            return f"… ({type(value).__name__} of {len(value)})"
        if isinstance(value, dict):
            items = [(preview(k, depth + 1), preview(v, depth + 1)) for k, v in _first(value.items())]
            shown: Any = {str(k): v for k, v in items}
            if len(value) > PREVIEW_ITEMS:
                shown["…"] = f"{len(value) - PREVIEW_ITEMS} more keys"
            return shown
        shown = [preview(v, depth + 1) for v in _first(value)]
        if len(value) > PREVIEW_ITEMS:
            shown.append(f"… {len(value) - PREVIEW_ITEMS} more items")
        return shown
    if isinstance(value, float) and not math.isfinite(value):
        return _number_text(value)  # JSON cannot carry it: the 422 itself would fail to serialise
    if value is None or isinstance(value, bool | int | float):
        return value
    return preview(repr(value), depth)


def _first(items: Any) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if len(out) == PREVIEW_ITEMS:
            break
        out.append(item)
    return out


async def validation_error_handler(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 body (``{"detail": [errors]}``) with every ``input`` and ``ctx`` value previewed."""
    assert isinstance(exc, RequestValidationError)
    errors = []
    all_errors = exc.errors()
    for error in all_errors[:MAX_ERRORS]:
        error = dict(error)
        if "input" in error:
            error["input"] = preview(error["input"])
        if isinstance(error.get("ctx"), dict):
            error["ctx"] = {key: preview(value) for key, value in error["ctx"].items()}
        if "loc" in error:
            error["loc"] = [preview(part) for part in error["loc"]]
        errors.append(error)
    if len(all_errors) > MAX_ERRORS:
        more = len(all_errors) - MAX_ERRORS
        errors.append({"type": "too_many_errors", "loc": [], "msg": f"{more} more errors not shown"})
    return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)


# ---- a body as a route reads it (public through ``ngym.plugin_api``: ``read_json``, ``validate_body``) ----


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
