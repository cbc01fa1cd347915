"""NeMo Gym's server base on ngym: its signatures, field names and routes, driven over HTTP through ngym's app."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from fastapi import FastAPI, Request
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
    ReverifyMode,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import Field, PrivateAttr

from ngym.testing import app_for_class, make_response, serve_in_process

ROW = {"responses_create_params": {"input": "count"}}


class CounterSeed(BaseSeedSessionRequest):
    start: int = 0


class StatelessConfig(BaseResourcesServerConfig):
    REVERIFY_MODE = ReverifyMode.STATELESS


class Counter(SimpleResourcesServer):
    """Keeps counts in its own ``_sessions`` dict, keyed by the cookie's session id, as NeMo Gym servers do."""

    config: StatelessConfig
    _sessions: dict[str, int] = PrivateAttr(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/increment")(self.increment)
        return app

    async def seed_session(self, request: Request, body: CounterSeed) -> BaseSeedSessionResponse:
        self._sessions[request.session[SESSION_ID_KEY]] = body.start
        return BaseSeedSessionResponse()

    async def increment(self, request: Request) -> dict[str, int]:
        session_id = request.session[SESSION_ID_KEY]
        self._sessions[session_id] += 1
        return {"count": self._sessions[session_id]}

    async def verify(self, request: Request, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=float(self._sessions[request.session[SESSION_ID_KEY]]))


class SeedEcho(BaseSeedSessionResponse):
    start: int


class BodyOnlySeed(SimpleResourcesServer):
    """NeMo Gym's default seed signature: ``seed_session(self, body)``."""

    seen: list[int] = Field(default_factory=list)

    async def seed_session(self, body: CounterSeed) -> SeedEcho:
        self.seen.append(body.start)
        return SeedEcho(start=body.start)

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


class GameBase(SimpleResourcesServer):
    """The shape of NeMo Gym's Gymnasium base: its own ``session_state`` dict and a hand-built app."""

    session_state: dict[str, Any] = Field(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = FastAPI()
        self.setup_session_middleware(app)
        app.post("/reset")(self.reset)
        app.post("/step")(self.step)
        return app

    async def reset(self, request: Request) -> dict[str, Any]:
        self.session_state[request.session[SESSION_ID_KEY]] = 0
        return {"observation": "start"}

    async def step(self, request: Request) -> dict[str, Any]:
        session_id = request.session.get(SESSION_ID_KEY)
        self.session_state[session_id] += 1
        return {"steps": self.session_state[session_id]}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        raise NotImplementedError


class Game(GameBase):
    pass


def _cookie(response: Any) -> dict[str, str]:
    return {"cookie": response.headers["set-cookie"].split(";")[0]}


async def test_environment_state_in_its_own_sessions_dict_survives_ngyms_session_manager() -> None:
    async with serve_in_process(app_for_class(Counter, domain="games")) as client:
        seeded = await client.post("/seed_session", json={**ROW, "start": 3})
        assert seeded.status_code == 200, seeded.text
        headers = _cookie(seeded)
        assert (await client.post("/increment", headers=headers)).json() == {"count": 4}
        verified = await client.post("/verify", json={**ROW, "response": make_response("x")}, headers=headers)
        assert verified.status_code == 200, verified.text
        assert verified.json()["reward"] == 4.0
        assert (await client.get("/reverify_mode")).json() == "stateless"  # REVERIFY_MODE on the config class


async def test_seed_session_written_with_the_body_only() -> None:
    server = BodyOnlySeed(config=BaseResourcesServerConfig(name="b", domain="other"))
    await server.seed_session(CounterSeed(start=1))  # as NeMo Gym's own tests call it
    async with serve_in_process(app_for_class(BodyOnlySeed, domain="other")) as client:
        answer = await client.post("/seed_session", json={**ROW, "start": 7})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"start": 7}  # ngym's route reached the body-only seed with the row
    assert server.seen == [1]


async def test_gymnasium_style_app_keeps_its_session_across_requests() -> None:
    game = Game(config=BaseResourcesServerConfig(name="g", domain="games"))
    assert game.session_state == {}  # the subclass's own field, not ngym's session_state() method
    app = game.setup_webserver()
    async with serve_in_process(app) as client:
        reset = await client.post("/reset")
        headers = _cookie(reset)
        await client.post("/step", headers=headers)
        second = await client.post("/step", headers=headers)
    assert second.json() == {"steps": 2}
    assert list(game.session_state.values()) == [2]


async def test_gymnasium_style_app_answers_the_health_checks_ngym_waits_on() -> None:
    """ngym run, ngym profile and the image's HEALTHCHECK poll /health: a hand-built app gets it too."""
    app = Game(config=BaseResourcesServerConfig(name="g", domain="games")).setup_webserver()
    async with serve_in_process(app) as client:
        health = await client.get("/health")
        live = await client.get("/healthz")
    assert health.status_code == 200, health.text
    assert health.json()["domain"] == "games"
    assert live.json() == {"status": "ok"}


def test_ngyms_session_state_method_stays_for_servers_without_the_field() -> None:
    server = BodyOnlySeed(config=BaseResourcesServerConfig(name="b"))
    assert callable(server.session_state)


def test_default_key_metrics_are_nemo_gyms_mean_entries() -> None:
    server = BodyOnlySeed(config=BaseResourcesServerConfig(name="b"))
    metrics = {"mean/reward": 0.5, "std/reward": 0.1, "pass@2/reward": 1.0, "mean/accuracy": 0.4}
    assert server.get_key_metrics(metrics) == {"mean/reward": 0.5, "mean/accuracy": 0.4}


class Failing(SimpleResourcesServer):
    """A tool that raises, as NeMo Gym environments' tools do on a bad state (openair_congestion's exhausted pool)."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/explode")(self.explode)
        return app

    async def explode(self) -> dict[str, Any]:
        raise RuntimeError("pool exhausted")

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        raise NotImplementedError


class FailingGame(GameBase):
    async def step(self, request: Request) -> dict[str, Any]:
        raise RuntimeError("no such move")


async def test_the_bare_app_lets_an_exception_reach_the_caller_as_nemo_gyms_does() -> None:
    """NeMo Gym's ``setup_webserver()`` adds no exception middleware (``run_webserver`` does): its environments'
    tests expect the error through ``httpx.ASGITransport`` / ``TestClient``."""
    for app, path in (
        (Failing(config=BaseResourcesServerConfig(name="f", domain="other")).setup_webserver(), "/explode"),
        (FailingGame(config=BaseResourcesServerConfig(name="g", domain="games")).setup_webserver(), "/step"),
    ):
        async with serve_in_process(app) as client:
            with pytest.raises(RuntimeError, match="pool exhausted|no such move"):
                await client.post(path)


async def test_the_served_app_answers_an_exception_as_500_with_its_repr() -> None:
    async with serve_in_process(app_for_class(Failing, domain="other")) as client:
        answer = await client.post("/explode")
        assert answer.status_code == 500
        assert answer.json() == "RuntimeError('pool exhausted')"
        assert "set-cookie" in answer.headers  # the session still travels with the error
        assert (await client.get("/health")).status_code == 200  # and the server keeps serving


class ClosesAnyBody(Counter):
    """swebench_pro's shape: ``close_resources_session(request, body: dict | None)`` handles every close."""

    async def close_resources_session(self, request: Request, body: dict[str, Any] | None = None) -> dict[str, Any]:
        dropped = self._sessions.pop(request.session.get(SESSION_ID_KEY, ""), None)
        return {"closed": True, "dropped": dropped, "body": body}


async def test_a_close_override_taking_any_body_gets_the_plain_close_too() -> None:
    async with serve_in_process(app_for_class(ClosesAnyBody, domain="games")) as client:
        seeded = await client.post("/seed_session", json={**ROW, "start": 3})
        assert (await client.get("/health")).json()["live_sessions"] == 1
        closed = await client.post("/close_session", json={}, headers=_cookie(seeded))
        assert closed.status_code == 200, closed.text
        assert closed.json() == {"closed": True, "dropped": 3, "body": None}  # NeMo routes it to the override
        assert (await client.get("/health")).json()["live_sessions"] == 0  # and ngym freed its own state


class TypedEpisodes(SimpleResourcesServer):
    """example_single_tool_call's shape (NeMo Gym 0.7): a typed seed and close keyed by ``resources_session_id``."""

    calls: ClassVar[list[str]] = []  # the app's server instance is ngym's: what it did is recorded on the class

    async def seed_session(self, body: ResourcesSeedSessionRequest) -> ResourcesSeedSessionResponse:
        self.calls.append(f"seed {body.resources_session_id}")
        return ResourcesSeedSessionResponse(resources_session_id=body.resources_session_id)

    async def close_resources_session(self, body: ResourcesCloseSessionRequest) -> ResourcesCloseSessionResponse:
        self.calls.append(f"close {body.resources_session_id}")
        return ResourcesCloseSessionResponse(resources_session_id=body.resources_session_id)

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


def _typed(session_id: str, rollout: str = "r1") -> dict[str, Any]:
    return {
        "resources_session_id": session_id,
        "episode_id": {"rollout_id": rollout, "attempt": 0},
        "task_id": {"taskset": "t", "task_id": "1"},
        "task_data": {},
    }


async def test_a_nemo_typed_seed_and_close_get_ngyms_session_guarantees() -> None:
    """The environment's own typed seed and close run inside ngym's session protocol: the session is bound and
    counted, a repeated seed or close does not reach the environment again, and a closed id is not seeded again."""
    TypedEpisodes.calls.clear()
    async with serve_in_process(app_for_class(TypedEpisodes, domain="other")) as client:
        seeded = await client.post("/seed_session", json=_typed("s-1"))
        assert seeded.status_code == 200, seeded.text
        assert seeded.json() == {"resources_session_id": "s-1"}
        assert (await client.get("/health")).json()["live_sessions"] == 1  # bound and counted by ngym
        again = await client.post("/seed_session", json=_typed("s-1"))
        assert again.json() == {"resources_session_id": "s-1"}
        other = await client.post("/seed_session", json=_typed("s-1", rollout="r2"))
        assert other.status_code == 409, other.text
        close = {"resources_session_id": "s-1", "episode_id": {"rollout_id": "r1", "attempt": 0}}
        for _ in range(2):
            closed = await client.post("/close_session", json=close)
            assert closed.status_code == 200, closed.text
            assert closed.json() == {"resources_session_id": "s-1"}
        assert (await client.get("/health")).json()["live_sessions"] == 0
        late = await client.post("/seed_session", json=_typed("s-1"))
        assert late.status_code == 409, late.text
    assert TypedEpisodes.calls == ["seed s-1", "close s-1"]
