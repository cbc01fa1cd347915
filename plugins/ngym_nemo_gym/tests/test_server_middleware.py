"""NeMo's serving-time middlewares on a hand-built app: exceptions become readable 500s."""

from __future__ import annotations

from aiohttp import ClientResponseError, RequestInfo
from fastapi import FastAPI
from fastapi.testclient import TestClient
from multidict import CIMultiDict, CIMultiDictProxy
from nemo_gym.server_middleware import add_exception_middleware
from yarl import URL


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/inner")
    async def inner() -> None:
        info = RequestInfo(URL("http://judge/v1/responses"), "POST", CIMultiDictProxy(CIMultiDict()))
        error = ClientResponseError(info, (), status=503)
        error.response_content = b"judge offline"  # type: ignore[attr-defined]
        raise error

    @app.get("/boom")
    async def boom() -> None:
        raise ValueError("bad row")

    add_exception_middleware(app, "Server___env")
    return app


def test_a_failed_inner_call_answers_500_with_the_inner_servers_answer() -> None:
    answer = TestClient(_app()).get("/inner")
    assert answer.status_code == 500
    assert answer.json() == "Hit an exception in Server___env calling an inner server: b'judge offline'"


def test_any_other_exception_answers_500_with_its_repr() -> None:
    answer = TestClient(_app()).get("/boom")
    assert (answer.status_code, answer.json()) == (500, "ValueError('bad row')")
