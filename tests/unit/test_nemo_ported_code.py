"""Code ported from NeMo Gym keeps working: state in the server's own dict keyed by request.session["session_id"]."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, Request
from pydantic import BaseModel, Field

from ngym import (
    SESSION_ID_KEY,
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process


class PortedConfig(BaseResourcesServerConfig):
    pass


class IncrementCounterRequest(BaseModel):
    count: int


class PortedSeed(BaseSeedSessionRequest):
    initial_count: int


class PortedVerify(BaseVerifyRequest):
    expected_count: int


class PortedCounterServer(SimpleResourcesServer):
    """NeMo Gym's session-state example as it is written there (but for the imports)."""

    config: PortedConfig
    session_id_to_counter: dict[str, int] = Field(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/increment_counter")(self.increment_counter)
        return app

    async def seed_session(self, request: Request, body: PortedSeed) -> BaseSeedSessionResponse:
        self.session_id_to_counter.setdefault(request.session[SESSION_ID_KEY], body.initial_count)
        return BaseSeedSessionResponse()

    async def increment_counter(self, request: Request, body: IncrementCounterRequest) -> dict:
        session_id = request.session[SESSION_ID_KEY]
        self.session_id_to_counter[session_id] = self.session_id_to_counter.setdefault(session_id, 0) + body.count
        return {"success": True}

    async def verify(self, request: Request, body: PortedVerify) -> BaseVerifyResponse:
        counter = self.session_id_to_counter.get(request.session[SESSION_ID_KEY])
        return BaseVerifyResponse(**body.model_dump(), reward=float(counter == body.expected_count))


RESPONSE = make_response()


async def test_dict_keyed_by_request_session_id_isolates_rollouts() -> None:
    async with serve_in_process(app_for_class(PortedCounterServer, domain="agent")) as http:

        async def rollout(i: int) -> float:
            client = RolloutClient(http)
            row = {"responses_create_params": {"input": "x"}, "initial_count": i, "expected_count": i + 2 * i}
            await client.call("/seed_session", row)
            for _ in range(2):
                await asyncio.sleep(0)
                await client.call("/increment_counter", {"count": i})
            return (await client.call("/verify", {**row, "response": RESPONSE}))["reward"]

        rewards = await asyncio.gather(*(rollout(i) for i in range(1, 51)))
        assert rewards == [1.0] * 50


class PoppingServer(PortedCounterServer):
    """Ends its session as swebench_pro's close does: ``request.session.pop("session_id")``."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/finish")(self.finish)
        return app

    async def finish(self, request: Request) -> dict:
        self.session_id_to_counter.pop(request.session.pop(SESSION_ID_KEY), None)
        return {"finished": True}


async def test_popping_the_session_id_ends_the_session_not_the_request() -> None:
    async with serve_in_process(app_for_class(PoppingServer, domain="agent")) as http:
        client = RolloutClient(http)
        row = {"responses_create_params": {"input": "x"}, "initial_count": 1, "expected_count": 1}
        await client.call("/seed_session", row)
        assert (await http.get("/health")).json()["live_sessions"] == 1
        finished = await http.post("/finish", headers={"cookie": client.cookie or ""})
        assert finished.status_code == 200, finished.text  # was a 500: KeyError in the session middleware
        assert (await http.get("/health")).json()["live_sessions"] == 0
