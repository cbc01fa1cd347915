"""How hosting and the protocol fronts plug into the pipeline: ``build_app`` applies the registered app extensions
in order (the built-in ones registered by ``ngym.server``), and an extension registered by anyone else runs after
them on every served app, with the server and its app."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer
from ngym.server.pipeline.extensions import (
    app_extensions,
    placed_for,
    register_app_extension,
    set_placement,
    unregister_app_extension,
)
from ngym.testing import app_for_class


class Plain(SimpleResourcesServer):
    domain = Domain.OTHER

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


def test_the_built_in_extensions_are_registered_in_serving_order() -> None:
    assert [name for name, _ in app_extensions()][:4] == ["ors", "environment loop", "mcp", "openenv"]


def test_a_registered_extension_sees_every_built_app_after_the_built_in_ones() -> None:
    seen: list[tuple[Any, list[str]]] = []

    def record(server: SimpleResourcesServer, app: FastAPI) -> None:
        seen.append((server, [getattr(route, "path", "") for route in app.router.routes]))

    register_app_extension("test-record", record)
    try:
        app_for_class(Plain)
    finally:
        assert unregister_app_extension("test-record") is record
    assert len(seen) == 1
    server, paths = seen[0]
    assert isinstance(server, Plain)
    assert "/verify" in paths and "/openenv" in paths  # the built-in fronts were mounted before it ran
    app_for_class(Plain)
    assert len(seen) == 1  # unregistered: no longer applied


def test_a_placement_wraps_the_authors_coroutines_and_without_one_they_are_left_as_they_are() -> None:
    app = FastAPI()

    async def hook() -> None:
        return None

    assert placed_for(app, hook) is hook
    wrapped: list[Any] = []

    def placement(function: Any) -> Any:
        wrapped.append(function)
        return function

    set_placement(app, placement)
    assert placed_for(app, hook) is hook and wrapped == [hook]
