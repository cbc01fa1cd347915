"""``@app.on_event("startup"/"shutdown")`` handlers an environment registers run, as on a plain FastAPI app.

FastAPI runs them only from its default lifespan, which ngym's replaces; NeMo Gym's competitive_coding_challenges
loads its evaluator (and refuses to start without its code sandbox) in one.
"""

from __future__ import annotations

import warnings
from typing import ClassVar

import pytest
from fastapi import FastAPI

from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer
from ngym.testing import app_for_class, serve_in_process


class WithEvents(SimpleResourcesServer):
    domain = Domain.OTHER
    events: ClassVar[list[str]] = []
    fail_startup: ClassVar[bool] = False

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        with warnings.catch_warnings():  # on_event is deprecated in FastAPI, still used by environments
            warnings.simplefilter("ignore", DeprecationWarning)

            @app.on_event("startup")
            async def load() -> None:
                if self.fail_startup:
                    raise RuntimeError("sandbox not ready")
                self.events.append("startup (async)")

            @app.on_event("startup")
            def load_sync() -> None:
                self.events.append("startup (sync)")

            @app.on_event("shutdown")
            async def unload() -> None:
                self.events.append("shutdown")

        return app

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


async def test_startup_and_shutdown_handlers_run_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(WithEvents, "events", [])
    async with serve_in_process(app_for_class(WithEvents)) as http:
        assert WithEvents.events == ["startup (async)", "startup (sync)"]
        assert (await http.get("/health")).status_code == 200
    assert WithEvents.events == ["startup (async)", "startup (sync)", "shutdown"]


async def test_a_failing_startup_handler_fails_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(WithEvents, "fail_startup", True)
    with pytest.raises(RuntimeError, match="sandbox not ready"):
        async with serve_in_process(app_for_class(WithEvents)):
            pass
