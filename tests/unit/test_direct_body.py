"""A route taking one body model reads it once, straight from the bytes, and answers exactly as FastAPI's road does."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pydantic_core
import pytest
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict

from ngym.server.pipeline import intake, routing
from ngym.server.pipeline.intake import may_hold_non_finite, non_finite_errors, validation_error_handler
from ngym.server.pipeline.routing import StrictJSONRoute
from ngym.testing import RolloutClient, make_response

JSON = {"content-type": "application/json"}


class City(BaseModel):
    city: str
    days: int = 1


class Answer(BaseModel):
    city: str
    days: int


class LongAnswer(Answer):
    extra: str = "left out by the declared model"


class Strict(BaseModel):
    model_config = ConfigDict(strict=True)
    days: int


def build_app() -> FastAPI:
    app = FastAPI()
    app.router.route_class = StrictJSONRoute
    app.add_exception_handler(RequestValidationError, validation_error_handler)

    @app.post("/answer")
    async def answer(body: City) -> Answer:
        return Answer(city=body.city, days=body.days)

    @app.post("/subclass")
    async def subclass(body: City) -> Answer:
        return LongAnswer(city=body.city, days=body.days)

    @app.post("/as_dict")
    async def as_dict(body: City) -> Answer:
        return {"city": body.city, "days": body.days}  # type: ignore[return-value]  # FastAPI validates it

    @app.post("/untyped", status_code=201)
    async def untyped(body: City, request: Request) -> dict[str, Any]:
        return {"city": body.city, "path": request.url.path}

    @app.post("/strict")
    async def strict(body: Strict) -> dict[str, int]:
        return {"days": body.days}

    return app


async def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.fixture
async def both(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The same app twice: with the direct road, and with every route on FastAPI's own road."""
    fast = build_app()
    monkeypatch.setattr(routing, "direct_body_handler", lambda *args: None)
    slow = build_app()
    async with await _client(fast) as fast_http, await _client(slow) as slow_http:
        yield fast_http, slow_http


CASES: list[tuple[str, bytes, dict[str, str]]] = [
    ("/answer", b'{"city": "Paris", "days": 3}', JSON),
    ("/answer", b'{"city": "Paris", "days": "3"}', JSON),  # lax: a numeric string is an int, as from a dict
    ("/answer", b'{"city": "Paris", "days": 3.5}', JSON),  # 422
    ("/answer", b'{"days": 3}', JSON),  # 422, missing field
    ("/answer", b'{"city": "Paris", "days": NaN}', JSON),  # 422 finite_number
    ("/answer", b'{"city": "Paris", "days": 1e400}', JSON),
    ("/answer", b'{"city": "Paris", "days": 1E+400}', JSON),
    ("/answer", b'{"city": "Paris", "days": -Infinity}', JSON),
    ("/answer", b'{"city": "Paris", "days": 1%s}' % (b"0" * 320), JSON),
    ("/answer", b'{"city": "Paris", "days": 1e30}', JSON),  # finite, but not an int: the same 422
    ("/answer", b'{"city": "a\\ud800b"}', JSON),  # lone surrogate: U+FFFD
    ("/answer", b'{"city": ', JSON),  # 422 json_invalid
    ("/answer", b"", JSON),  # 422 missing body
    ("/answer", b'{"city": "Paris"}', {"content-type": "text/plain"}),  # not JSON: FastAPI refuses
    ("/answer", b'{"city": "Paris"}', {}),  # no content type: FastAPI (strict) refuses
    ("/answer", b'{"city": "Paris"}', {"content-type": "application/json; charset=utf-8"}),
    ("/answer", b'{"city": "Paris"}', {"content-type": "application/vnd.api+json"}),
    ("/answer", b'[{"city": "Paris"}]', JSON),
    ("/subclass", b'{"city": "Paris"}', JSON),  # the declared model's fields only
    ("/as_dict", b'{"city": "Paris"}', JSON),
    ("/untyped", b'{"city": "Paris"}', JSON),  # status code, request parameter
    ("/strict", b'{"days": "3"}', JSON),  # a strict model refuses a string from a dict: still refused
    ("/strict", b'{"days": 3}', JSON),
]


@pytest.mark.parametrize(("path", "body", "headers"), CASES)
async def test_the_direct_road_answers_as_fastapis_does(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient], path: str, body: bytes, headers: dict[str, str]
) -> None:
    fast, slow = both
    expected = await slow.post(path, content=body, headers=headers)
    answered = await fast.post(path, content=body, headers=headers)
    assert answered.status_code == expected.status_code, answered.text
    assert answered.json() == expected.json()
    assert answered.headers["content-type"] == expected.headers["content-type"]


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count ``parse_json`` calls (FastAPI's road parses every body with it before validating the dict)."""
    calls = [0]
    original: Callable[[Any], Any] = intake.parse_json

    def counting(raw: Any) -> Any:
        calls[0] += 1
        return original(raw)

    monkeypatch.setattr(intake, "parse_json", counting)
    return calls


async def test_a_tool_call_and_verify_parse_their_body_once_from_the_bytes(
    weather_http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    rollout = RolloutClient(weather_http)
    await rollout.call("/seed_session", {"responses_create_params": {"input": "weather?"}})
    calls = _count_parses(monkeypatch)
    tool = await weather_http.post(
        "/get_weather", content=b'{"city": "Paris"}', headers={**JSON, "cookie": rollout.cookie or ""}
    )
    assert tool.status_code == 200 and tool.json()["city"] == "Paris"
    response = make_response(calls=[("get_weather", {"city": "Paris"})])
    verified = await rollout.call("/verify", {"responses_create_params": {"input": "weather?"}, "response": response})
    assert verified["reward"] == 1.0
    assert calls[0] == 0  # validated straight from the bytes: no dict built first


async def test_a_verify_body_with_nemo_gym_ids_is_read_once_from_the_bytes(
    weather_http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NeMo Gym's rollouts carry ids like ``resp_9d1e9866...`` (an "e" and three digits): such a body was taken for
    one that may hold a non-finite number, parsed to a dict and walked, off the direct road (issue 22)."""
    rollout = RolloutClient(weather_http)
    await rollout.call("/seed_session", {"responses_create_params": {"input": "weather?"}})
    calls = _count_parses(monkeypatch)
    response = make_response(calls=[("get_weather", {"city": "Paris"})])
    response["id"] = "resp_9d1e9866540c42be9"
    verified = await rollout.call("/verify", {"responses_create_params": {"input": "weather?"}, "response": response})
    assert verified["reward"] == 1.0
    assert calls[0] == 0


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": NaN}',
        b"[-Infinity]",
        b"  -Infinity",
        b'{"a": 1e400}',
        b'{"a":\n\t-1e999}',
        b"1e400",
        b'{"a": 1.5e0400}',
        # 251 digits and a 2-digit exponent: beyond a double's range, missed by the check before (it wanted 300)
        b'{"a": %se99}' % (b"9" * 251),
    ],
)
def test_the_quick_non_finite_check_misses_nothing_the_exact_one_finds(raw: bytes) -> None:
    """Each sample parses to a non-finite number: the quick check says maybe, and the exact one finds it."""
    assert non_finite_errors(raw, pydantic_core.from_json(raw))
    assert may_hold_non_finite(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1e30, "b": [1.5, -2, 3e-99]}',
        b'{"city": "Paris", "days": 12}',
        b"{}",
        # NeMo Gym's ids hold an "e" and three digits in most rollouts: not a number, so not a candidate
        b'{"response": {"id": "resp_9d1e9866540c42be9", "output": [{"id": "msg_1e100"}]}}',
        b'{"a": 1e30, "b": "file123", "c": -1e-400}',
        b'{"text": "the word NaN in model output, and Infinity too"}',
    ],
)
def test_the_quick_non_finite_check_passes_plain_numbers(raw: bytes) -> None:
    assert not may_hold_non_finite(raw)


def test_the_quick_non_finite_check_says_maybe_past_too_many_candidates() -> None:
    """A body made of candidates that are not numbers costs a bounded number of checks, then goes the exact road."""
    raw = b'{"ids": "%s"}' % (b"x1e100 " * 1000)
    assert may_hold_non_finite(raw)
    assert non_finite_errors(raw) == []
