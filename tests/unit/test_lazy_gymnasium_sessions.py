"""Gymnasium episodes NeMo Gym's way (no seed: state under ``request.session["session_id"]`` of the /reset).

Each finished episode frees its session (the last /step, or /close when /reset advertised it), so a server
driven at training rates never fills ``max_sessions``. When the lazy share is full all the same, a /reset closes
the least recently used episode (``lazy_sessions_full: evict_oldest``, the default), whose next step is then a 410,
never a fresh episode scored under the old id; or answers 503 (``refuse``), never 200 without a session (whose
episode then started from nothing and was scored on state it never had).
"""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI, Request
from pydantic import Field

from ngym import SESSION_ID_KEY, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer
from ngym.testing import RolloutClient, app_for_class, serve_in_process

FOLLOW_UPS = 2  # steps before the scored one


class CountingGym(SimpleResourcesServer):
    """NeMo Gym's multi-turn Gymnasium example as written there: a step without state starts at turn 0."""

    turns: dict[str, int] = Field(default_factory=dict)
    explicit_close: bool = False

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/reset")(self.reset)
        app.post("/step")(self.step)
        app.post("/close")(self.close)
        return app

    async def reset(self, request: Request) -> dict[str, Any]:
        self.turns[request.session[SESSION_ID_KEY]] = 0
        return {"observation": None, "info": {"supports_explicit_close": self.explicit_close}}

    async def step(self, request: Request) -> dict[str, Any]:
        session_id = request.session[SESSION_ID_KEY]
        turn = self.turns.get(session_id, 0)
        if turn < FOLLOW_UPS:
            self.turns[session_id] = turn + 1
            return {"observation": "more", "reward": 0.0, "terminated": False, "truncated": False}
        self.turns.pop(session_id, None)
        return {"observation": None, "reward": 1.0, "terminated": True, "truncated": False}

    async def close(self, request: Request) -> dict[str, Any]:
        self.turns.pop(request.session[SESSION_ID_KEY], None)
        return {"message": "closed", "success": True}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        raise NotImplementedError("scored by /step")


class ClosingGym(CountingGym):
    """Advertises ``supports_explicit_close``: its client sends /close after the episode."""

    explicit_close: bool = True


async def live_sessions(http: httpx.AsyncClient) -> int:
    answer = await http.get("/health")
    return int(answer.json()["live_sessions"])


async def episode(http: httpx.AsyncClient, *, close: bool = False) -> float:
    """reset → step until the episode ends; the sum of the steps' rewards (1.0 when the state was kept)."""
    client = RolloutClient(http)
    await client.call("/reset", {})
    total = 0.0
    for _ in range(FOLLOW_UPS + 1):
        answer = await client.call("/step", {})
        total += answer["reward"]
        if answer["terminated"]:
            break
    if close:
        await client.call("/close", {})
    return total


async def test_finished_episodes_free_their_sessions_so_the_bound_is_never_reached() -> None:
    async with serve_in_process(app_for_class(CountingGym, domain="games", max_sessions=3)) as http:
        rewards = [await episode(http) for _ in range(12)]
        assert rewards == [1.0] * 12
        assert await live_sessions(http) == 0


async def test_a_full_store_answers_reset_with_503_and_live_episodes_finish_right() -> None:
    app = app_for_class(CountingGym, domain="games", max_sessions=2, lazy_sessions_full="refuse")
    async with serve_in_process(app) as http:
        started = [RolloutClient(http) for _ in range(2)]
        for client in started:
            await client.call("/reset", {})
        refused = await RolloutClient(http).post("/reset", {})
        assert refused.status_code == 503
        assert "session limit" in refused.json()["detail"]
        assert "set-cookie" not in refused.headers
        for client in started:  # the two live episodes are untouched by the refused one
            answers = [await client.call("/step", {}) for _ in range(FOLLOW_UPS + 1)]
            assert answers[-1] == {"observation": None, "reward": 1.0, "terminated": True, "truncated": False}
        assert await live_sessions(http) == 0
        assert await episode(http) == 1.0  # room again


async def test_an_episode_that_advertises_close_lives_until_close() -> None:
    app = app_for_class(ClosingGym, domain="games", max_sessions=3)
    async with serve_in_process(app) as http:
        client = RolloutClient(http)
        await client.call("/reset", {})
        for _ in range(FOLLOW_UPS + 1):
            await client.call("/step", {})
        assert await live_sessions(http) == 1  # the client still owes its /close
        assert (await client.call("/close", {}))["success"] is True
        assert await live_sessions(http) == 0
        assert [await episode(http, close=True) for _ in range(6)] == [1.0] * 6
        assert await live_sessions(http) == 0


async def test_a_full_share_closes_the_least_recently_used_episode_whose_next_step_is_lost() -> None:
    async with serve_in_process(app_for_class(CountingGym, domain="games", max_sessions=2)) as http:
        oldest, recent = RolloutClient(http), RolloutClient(http)
        await oldest.call("/reset", {})
        await recent.call("/reset", {})
        await oldest.call("/step", {})  # used last: the other one is the least recently used
        newest = RolloutClient(http)
        await newest.call("/reset", {})
        health = (await http.get("/health")).json()
        assert health["lazy_sessions"] == {"live": 2, "limit": 2, "evicted": 1}
        # the evicted episode's step would start at turn 0 in this environment and score 1.0 two steps later:
        # it is a 410 instead, every time, and keeps nothing
        for _ in range(FOLLOW_UPS + 1):
            lost = await recent.post("/step", {})
            assert lost.status_code == 410 and lost.json()["failure_kind"] == "session_lost"
        for client, steps_left in ((oldest, FOLLOW_UPS), (newest, FOLLOW_UPS + 1)):
            answers = [await client.call("/step", {}) for _ in range(steps_left)]
            assert answers[-1]["terminated"] is True and answers[-1]["reward"] == 1.0
        assert await live_sessions(http) == 0
