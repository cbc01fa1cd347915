"""RequestOnlyRoute answers exactly as FastAPI's own route does, for every kind of result and error; a route whose
endpoint asks for more than the request keeps FastAPI's handling."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.responses import PlainTextResponse

from ngym.server.pipeline.intake import validation_error_handler
from ngym.server.pipeline.routing import RequestOnlyRoute, StrictJSONRoute


class Item(BaseModel):
    name: str
    score: float = 0.5
    tags: list[str] = []


async def endpoint(request: Request) -> Any:
    kind = (await request.json())["kind"]
    results: dict[str, Any] = {
        "dict": {"a": 1, "b": [1.5, None, "x"], "nested": Item(name="n")},
        "model": Item(name="m", tags=["t"]),
        "none": None,
        "list": [Item(name="l"), {"k": "v"}],
        "text": "just a string",
        "response": PlainTextResponse("plain", status_code=201, headers={"x-mine": "1"}),
    }
    if kind == "conflict":
        raise HTTPException(409, "seeded for another episode", headers={"retry-after": "1"})
    if kind == "invalid":
        raise RequestValidationError([{"type": "missing", "loc": ("body", "x"), "msg": "Field required", "input": {}}])
    return results[kind]


def app_with(route_class: type[StrictJSONRoute]) -> FastAPI:
    app = FastAPI()
    app.router.route_class = StrictJSONRoute
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.router.add_api_route("/e", endpoint, methods=["POST"], route_class_override=route_class)
    return app


async def answer(app: FastAPI, method: str, body: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.request(method, "/e", json=body)
    return response.status_code, sorted(response.headers.multi_items()), response.content


@pytest.mark.parametrize("kind", ["dict", "model", "none", "list", "text", "response", "conflict", "invalid"])
async def test_answers_are_byte_for_byte_fastapis(kind: str) -> None:
    ours = await answer(app_with(RequestOnlyRoute), "POST", {"kind": kind})
    fastapis = await answer(app_with(StrictJSONRoute), "POST", {"kind": kind})
    assert ours == fastapis


async def test_wrong_method_and_bad_json_are_fastapis_too() -> None:
    for method, body in (("GET", None), ("PUT", {"kind": "dict"})):
        assert await answer(app_with(RequestOnlyRoute), method, body) == await answer(
            app_with(StrictJSONRoute), method, body
        )


def test_the_endpoint_is_called_directly_only_when_it_takes_just_the_request() -> None:
    async def with_query(request: Request, q: int = 0) -> Any:
        return {}

    app = FastAPI()
    app.router.add_api_route("/only", endpoint, methods=["POST"], route_class_override=RequestOnlyRoute)
    app.router.add_api_route("/more", with_query, methods=["POST"], route_class_override=RequestOnlyRoute)
    app.router.add_api_route(
        "/status", endpoint, methods=["POST"], status_code=201, route_class_override=RequestOnlyRoute
    )
    routes = {route.path: route for route in app.router.routes if isinstance(route, RequestOnlyRoute)}
    assert routes["/only"].app == routes["/only"]._serve
    assert routes["/more"].app != routes["/more"]._serve
    assert routes["/status"].app != routes["/status"]._serve


def test_seed_and_close_of_every_server_use_it_and_the_openapi_page_still_documents_them() -> None:
    from ngym.server.pipeline.app import ServeSpec, build_app, build_server

    server = build_server(ServeSpec(target="example_single_tool_call.app:WeatherResourcesServer", name="w"))
    app = build_app(server, app_plugins=False)
    routes = {getattr(route, "path", None): route for route in app.router.routes}
    for path in ("/seed_session", "/close_session"):
        route = routes[path]
        assert isinstance(route, RequestOnlyRoute) and route.app == route._serve
    paths = app.openapi()["paths"]
    assert "requestBody" in paths["/seed_session"]["post"] and "/close_session" in paths
