"""The Redis store behind real ngym apps (in-process): shared sessions, close hook once, 503 while Redis is down."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import pytest
from fastapi import Request
from ngym_redis.testing import RedisServer
from pydantic import BaseModel

from ngym import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    Domain,
    SimpleResourcesServer,
)
from ngym.testing import RolloutClient, app_for, app_for_class, make_response, serve_in_process

COUNTER = "example_session_state_mgmt"


@contextlib.asynccontextmanager
async def replicas(url: str, n: int, **fields: Any) -> AsyncIterator[list[httpx.AsyncClient]]:
    """``n`` separate apps of the counter env (separate stores, one Redis, one secret)."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                serve_in_process(app_for(COUNTER, session_store=url, session_secret="shared", **fields))
            )
            for _ in range(n)
        ]


class Spread:
    """A rollout client whose every call goes to the next replica (the cookie travels by hand)."""

    def __init__(self, https: list[httpx.AsyncClient]) -> None:
        self.clients = [RolloutClient(h) for h in https]
        self.turn = 0

    async def post(self, path: str, body: Any = None) -> httpx.Response:
        client = self.clients[self.turn % len(self.clients)]
        self.turn += 1
        client.cookie = self.cookie
        response = await client.post(path, body)
        self.cookie = client.cookie
        return response

    cookie: str | None = None


async def test_a_rollout_spread_over_three_apps_gets_its_reward(redis_url: str) -> None:
    async with replicas(redis_url, 3) as https:
        for start, adds in ((3, [3]), (0, [2, 5]), (10, [-4, 1, 1])):
            rollout = Spread(https)
            assert (await rollout.post("/seed_session", {"initial_count": start})).status_code == 200
            for add in adds:
                assert (await rollout.post("/increment_counter", {"count": add})).json() == {"success": True}
            assert (await rollout.post("/get_counter_value")).json() == {"count": start + sum(adds)}
            verified = (
                await rollout.post(
                    "/verify",
                    {
                        "expected_count": start + sum(adds),
                        "responses_create_params": {"input": []},
                        "response": {
                            "id": "r",
                            "created_at": 0,
                            "model": "m",
                            "object": "response",
                            "output": [],
                            "parallel_tool_calls": False,
                            "tool_choice": "auto",
                            "tools": [],
                        },
                    },
                )
            ).json()
            assert verified["reward"] == 1.0 and verified["final_count"] == start + sum(adds)
            # closed after verify, for every replica
            assert (await rollout.post("/get_counter_value")).status_code == 410  # gone: a lost session (sessions.lost)


async def test_health_reports_the_shared_live_sessions(redis_url: str) -> None:
    async with replicas(redis_url, 2) as (one, two):
        await RolloutClient(one).call("/seed_session", {"initial_count": 1})
        health = (await two.get("/health")).json()
        assert health["live_sessions"] == 1 and health["session_store"] == "RedisSessionStore"


async def test_a_replica_restart_keeps_the_rollout(redis_url: str) -> None:
    client: RolloutClient
    async with replicas(redis_url, 1) as (http,):
        client = RolloutClient(http)
        await client.call("/seed_session", {"initial_count": 5})
        await client.call("/increment_counter", {"count": 2})
    # the app shut down (its lifespan ended): shared sessions are not closed at shutdown
    async with replicas(redis_url, 1) as (http,):
        client.http = http
        assert await client.call("/get_counter_value") == {"count": 7}


async def test_typed_seed_flow_is_idempotent_and_not_resurrected_across_replicas(redis_url: str) -> None:
    episode = {"episode_id": {"rollout_id": "r-1"}, "task_id": {"taskset": "d", "task_id": "t-1"}}
    async with replicas(redis_url, 2) as (one, two):
        body = {"resources_session_id": "rs-1", **episode, "task_data": {"initial_count": 4}}
        first = await one.post("/seed_session", json=body)
        assert first.status_code == 200, first.text
        assert (await two.post("/seed_session", json=body)).status_code == 200  # idempotent, on another replica
        close = {"resources_session_id": "rs-1", "episode_id": episode["episode_id"]}
        assert (await two.post("/close_session", json=close)).status_code == 200
        assert (await one.post("/close_session", json=close)).status_code == 200  # idempotent
        again = await one.post("/seed_session", json=body)
        assert again.status_code == 409 and "was closed" in again.text


async def test_redis_down_is_a_clear_503_and_recovery_follows(own_redis: RedisServer) -> None:
    server = own_redis
    try:
        async with replicas(server.url, 1, session_ttl_seconds=3600) as (http,):
            client = RolloutClient(http)
            await client.call("/seed_session", {"initial_count": 1})
            server.stop()
            for path, body in (("/increment_counter", {"count": 1}), ("/seed_session", {"initial_count": 0})):
                down = await client.post(path, body)
                assert down.status_code == 503, down.text
                assert down.headers["retry-after"] == "1"
                assert down.json()["detail"].startswith("session store unavailable: Redis at redis://127.0.0.1:")
            health = await http.get("/health")
            assert health.status_code == 503 and "unavailable" in health.json()["detail"]
            assert (await http.get("/livez")).status_code == 200  # the process itself is alive
            server.restart()  # empty Redis: the old session is gone, new rollouts work
            assert (await client.post("/get_counter_value")).status_code == 410  # its session is gone: lost
            await client.call("/seed_session", {"initial_count": 2})
            await client.call("/increment_counter", {"count": 3})
            assert await client.call("/get_counter_value") == {"count": 5}
    finally:
        server.stop()


async def test_a_store_that_does_not_answer_at_startup_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """`NGYM_SESSION_STORE=redis://...` with no Redis there (never started): the server starts, as it does when
    Redis goes away under it, and its log says so at once, not only each rollout's 503."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="ngym"):
        async with replicas(f"redis://127.0.0.1:{port}/0", 1) as (http,):
            assert (await http.get("/livez")).status_code == 200
    said = [r.getMessage() for r in caplog.records if "the session store does not answer" in r.getMessage()]
    assert len(said) == 1 and f"127.0.0.1:{port}" in said[0] and "503" in said[0], caplog.text


class Note(BaseModel):
    text: str = ""


class NoteSeed(BaseSeedSessionRequest):
    text: str = ""


class NoteServer(SimpleResourcesServer):
    """Records every close hook call (across all its apps: one list per class) with the state it was given."""

    config: BaseResourcesServerConfig
    domain = Domain.OTHER
    session_state_model = Note
    closed: ClassVar[list[tuple[str, str]]] = []

    async def seed_session(self, request: Request, body: NoteSeed) -> BaseSeedSessionResponse:
        self.set_session_state(request, Note(text=body.text))
        return BaseSeedSessionResponse()

    async def verify(self, request: Request, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        self.closed.append((session_id, state.text))


@contextlib.asynccontextmanager
async def note_replicas(url: str, n: int, **fields: Any) -> AsyncIterator[list[httpx.AsyncClient]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(
                serve_in_process(app_for_class(NoteServer, "notes", session_store=url, session_secret="s", **fields))
            )
            for _ in range(n)
        ]


def session_id_of(client: RolloutClient) -> str:
    """The session id inside the client's signed cookie (``name=<id>.<tag>``)."""
    assert client.cookie is not None
    return client.cookie.partition("=")[2].rpartition(".")[0]


async def test_the_close_hook_runs_once_with_the_stored_state_on_close_verify_and_expiry(redis_url: str) -> None:
    NoteServer.closed.clear()
    async with note_replicas(redis_url, 2) as (one, two):
        closed, verified = RolloutClient(one), RolloutClient(one)
        await closed.call("/seed_session", {"text": "closed"})
        await verified.call("/seed_session", {"text": "verified"})
        closed.http = verified.http = two  # the other replica ends them, from the state it reads in Redis
        await closed.call("/close_session")
        await closed.call("/close_session")  # a repeated close runs nothing
        await verified.call("/verify", {"responses_create_params": {"input": []}, "response": make_response("ok")})
    assert sorted(NoteServer.closed) == sorted(
        [(session_id_of(closed), "closed"), (session_id_of(verified), "verified")]
    )

    NoteServer.closed.clear()
    async with note_replicas(redis_url, 3, session_ttl_seconds=0.4) as apps:  # three sweepers, every 0.1 s
        idle = RolloutClient(apps[0])
        await idle.call("/seed_session", {"text": "idle"})
        await asyncio.sleep(1.2)
        assert (await apps[1].get("/health")).json()["live_sessions"] == 0
    assert NoteServer.closed == [(session_id_of(idle), "idle")]  # exactly once across the replicas


async def test_shutdown_closes_nothing_the_session_lives_on_in_redis(redis_url: str) -> None:
    NoteServer.closed.clear()
    async with note_replicas(redis_url, 1) as (http,):
        client = RolloutClient(http)
        await client.call("/seed_session", {"text": "kept"})
    assert NoteServer.closed == []  # the app shut down: a shared session is not the process's to close
    async with note_replicas(redis_url, 1) as (http,):
        client.http = http
        await client.call("/close_session")
    assert NoteServer.closed == [(session_id_of(client), "kept")]
