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
    assert game.session_state == {}  # the live session was closed at shutdown: its entry freed


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
        assert "set-cookie" not in answer.headers  # an error hands out no session
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


class NemoCounter(SimpleResourcesServer):
    """NeMo Gym 0.7.0's example_session_state_mgmt as written there: a dict keyed by the session id, never freed."""

    session_id_to_counter: dict[str, int] = Field(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/increment_counter")(self.increment_counter)
        app.post("/get_counter_value")(self.get_counter_value)
        return app

    async def seed_session(self, request: Request, body: CounterSeed) -> BaseSeedSessionResponse:
        self.session_id_to_counter.setdefault(request.session[SESSION_ID_KEY], body.start)
        return BaseSeedSessionResponse()

    async def increment_counter(self, request: Request) -> dict[str, bool]:
        session_id = request.session[SESSION_ID_KEY]
        self.session_id_to_counter[session_id] = self.session_id_to_counter.setdefault(session_id, 0) + 1
        return {"success": True}

    async def get_counter_value(self, request: Request) -> dict[str, int]:
        return {"count": self.session_id_to_counter.setdefault(request.session[SESSION_ID_KEY], 0)}

    async def verify(self, request: Request, body: BaseVerifyRequest) -> BaseVerifyResponse:
        counter = self.session_id_to_counter.get(request.session[SESSION_ID_KEY])
        return BaseVerifyResponse(**body.model_dump(), reward=float(counter == 2))


async def test_tool_calls_without_a_session_cannot_grow_a_nemo_environments_state_without_bound() -> None:
    server = NemoCounter(config=BaseResourcesServerConfig(name="c", max_sessions=50, session_ttl_seconds=3600))
    async with serve_in_process(server.setup_webserver()) as client:
        # each cookie-less call starts a session NeMo Gym's way (lazily): a live session in a share of their own
        # (max_lazy_sessions, default max_sessions); past it the least recently used lazy one is closed (its entry
        # freed, counted), so the environment's dict stays bounded and no call is refused
        statuses = [(await client.post("/increment_counter", json={})).status_code for _ in range(400)]
        assert statuses == [200] * 400
        assert len(server.session_id_to_counter) == 50
        health = (await client.get("/health")).json()
        assert health["live_sessions"] == 50
        assert health["lazy_sessions"] == {"live": 50, "limit": 50, "evicted": 350}
    assert server.session_id_to_counter == {}  # every live session closed at shutdown, every entry freed


async def test_a_flood_of_cookie_less_calls_never_refuses_a_seed_and_its_evicted_sessions_are_lost() -> None:
    server = NemoCounter(config=BaseResourcesServerConfig(name="c", max_sessions=10, session_ttl_seconds=3600))
    async with serve_in_process(server.setup_webserver()) as client:
        seeded = [_cookie(await client.post("/seed_session", json={**ROW, "start": 1})) for _ in range(4)]
        first_lazy = _cookie(await client.post("/increment_counter", json={}))
        flood = [(await client.post("/increment_counter", json={})).status_code for _ in range(200)]
        assert flood == [200] * 200
        # the store is full (4 seeded + 6 lazy): each new seed closes the least recently used lazy session
        for _ in range(6):
            answer = await client.post("/seed_session", json={**ROW, "start": 1})
            assert answer.status_code == 200, answer.text
            seeded.append(_cookie(answer))
        assert (await client.get("/health")).json()["lazy_sessions"]["live"] == 0
        # full of seeded sessions now: a seed or a lazy start is refused, no seeded session is touched
        assert (await client.post("/seed_session", json={**ROW, "start": 1})).status_code == 503
        assert (await client.post("/increment_counter", json={})).status_code == 503
        for cookie in seeded:
            assert (await client.post("/increment_counter", json={}, headers=cookie)).status_code == 200
            verified = await client.post("/verify", json={**ROW, "response": make_response()}, headers=cookie)
            assert verified.json()["reward"] == 1.0 and not verified.json().get("mask_sample")
        # an evicted lazy session is lost: its next call is a 410 that keeps nothing, its verify masked
        gone = await client.post("/increment_counter", json={}, headers=first_lazy)
        assert gone.status_code == 410 and "set-cookie" not in gone.headers
        lazy_id = first_lazy["cookie"].split("=", 1)[1].rsplit(".", 1)[0]
        assert lazy_id not in server.session_id_to_counter
        masked = await client.post("/verify", json={**ROW, "response": make_response()}, headers=first_lazy)
        assert masked.json()["mask_sample"] is True and masked.json()["failure_kind"] == "session_lost"


async def test_max_lazy_sessions_bounds_the_lazy_share_apart_from_seeds() -> None:
    config = BaseResourcesServerConfig(name="c", max_sessions=100, max_lazy_sessions=5)
    server = NemoCounter(config=config)
    async with serve_in_process(server.setup_webserver()) as client:
        cookies = [_cookie(await client.post("/increment_counter", json={})) for _ in range(5)]
        # a lazy session in use moves to the back of the line: the untouched ones go first
        assert (await client.post("/increment_counter", json={}, headers=cookies[0])).status_code == 200
        for _ in range(4):
            await client.post("/increment_counter", json={})
        assert (await client.get("/health")).json()["lazy_sessions"] == {"live": 5, "limit": 5, "evicted": 4}
        assert (await client.post("/get_counter_value", json={}, headers=cookies[0])).json() == {"count": 2}
        assert [(await client.post("/get_counter_value", json={}, headers=c)).status_code for c in cookies[1:]] == [
            410
        ] * 4


async def test_an_evicted_gymnasium_episode_is_not_restarted_under_its_old_cookie() -> None:
    """A Gymnasium-shaped server keeps no state ngym knows of (no seed_session): an evicted episode's next /reset
    or /step still answers 410, never a fresh episode under the old id (nor a KeyError 500)."""
    server = Game(config=BaseResourcesServerConfig(name="g", max_sessions=3))
    async with serve_in_process(server.setup_webserver()) as client:
        old = _cookie(await client.post("/reset", json={}))
        for _ in range(3):
            assert (await client.post("/reset", json={})).status_code == 200
        for path in ("/step", "/reset"):
            answer = await client.post(path, json={}, headers=old)
            assert answer.status_code == 410 and answer.json()["failure_kind"] == "session_lost", answer.text
        assert len(server.session_state) == 3


async def test_a_seeded_nemo_session_frees_its_entry_when_it_closes() -> None:
    server = NemoCounter(config=BaseResourcesServerConfig(name="c"))
    async with serve_in_process(server.setup_webserver()) as client:
        seeded = await client.post("/seed_session", json={**ROW, "start": 1})
        cookie = _cookie(seeded)
        session_id = cookie["cookie"].split("=", 1)[1].rsplit(".", 1)[0]
        assert session_id in server.session_id_to_counter
        await client.post("/increment_counter", json={}, headers=cookie)
        verified = await client.post("/verify", json={**ROW, "response": make_response()}, headers=cookie)
        assert verified.json()["reward"] == 1.0
        assert session_id not in server.session_id_to_counter  # closed after verify


async def test_a_lazily_started_nemo_session_is_a_live_session_like_a_seeded_one() -> None:
    server = NemoCounter(config=BaseResourcesServerConfig(name="c"))
    async with serve_in_process(server.setup_webserver()) as client:
        first = await client.post("/increment_counter", json={})
        cookie = _cookie(first)
        assert (await client.post("/get_counter_value", json={}, headers=cookie)).json() == {"count": 1}
        assert (await client.get("/health")).json()["live_sessions"] == 1
        # a 404 without a session hands out none and keeps nothing
        missing = await client.post("/nonexistent", json={})
        assert missing.status_code == 404 and "set-cookie" not in missing.headers
        assert len(server.session_id_to_counter) == 1
        await client.post("/close_session", json={}, headers=cookie)
        assert server.session_id_to_counter == {}
        gone = await client.post("/increment_counter", json={}, headers=cookie)
        assert gone.status_code == 410 and "set-cookie" not in gone.headers  # closed: lost, never restarted
