"""Core behaviour for shared stores: a failing store is HTTP 503 (not 500), saves happen before the response,
and the workers of one ``ngym run`` share a made-up session secret."""

from __future__ import annotations

import os
from typing import Any

import pytest
from fastapi import Request
from pydantic import BaseModel

from ngym import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseVerifyRequest,
    BaseVerifyResponse,
    Domain,
    SimpleResourcesServer,
)
from ngym.errors import SessionStoreError
from ngym.server.hosting.host import share_secret_between_workers
from ngym.server.pipeline.app import ServeSpec
from ngym.server.sessions.store import MemorySessionStore, SessionLimitReached, SessionRecord, SessionStore
from ngym.testing import RolloutClient, app_for_class, serve_in_process


class FlakyStore(MemorySessionStore):
    """A serialising store that can be switched off, and counts saves."""

    shares_objects = False
    down = False
    full = False
    saves: list[Any] = []

    def _check(self) -> None:
        if FlakyStore.down:
            raise SessionStoreError("store at flaky://x failed to answer: connection refused")

    async def load(self, session_id: str) -> SessionRecord | None:
        self._check()
        record = await super().load(session_id)
        return None if record is None else SessionRecord(state=record.state.model_copy(), meta=record.meta)

    async def save(self, session_id: str, record: SessionRecord) -> None:
        self._check()
        FlakyStore.saves.append(record.state.model_copy())
        await super().create(session_id, record)

    async def create(self, session_id: str, record: SessionRecord) -> None:
        self._check()
        if FlakyStore.full:
            raise SessionLimitReached("1 sessions are live")
        await super().create(session_id, record)

    async def count(self) -> int:
        self._check()
        return await super().count()


class Count(BaseModel):
    n: int = 0


class Cfg(BaseResourcesServerConfig):
    pass


class Env(SimpleResourcesServer):
    config: Cfg
    domain = Domain.OTHER
    session_state_model = Count

    def setup_webserver(self):  # type: ignore[no-untyped-def]
        app = super().setup_webserver()
        app.post("/add")(self.add)
        return app

    def _make_store(self) -> SessionStore:
        return FlakyStore(ttl_seconds=60, max_sessions=10)

    async def seed_session(self, request: Request, body: BaseSeedSessionRequest) -> dict:
        self.set_session_state(request, Count())
        return {}

    async def add(self, request: Request) -> dict:
        state = self.session_state(request)
        state.n += 1
        return {"n": state.n}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


@pytest.fixture(autouse=True)
def _reset() -> None:
    FlakyStore.down = FlakyStore.full = False
    FlakyStore.saves = []


async def test_changes_are_saved_back_before_the_response() -> None:
    async with serve_in_process(app_for_class(Env)) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        assert await client.call("/add") == {"n": 1}
        assert await client.call("/add") == {"n": 2}
        assert [s.n for s in FlakyStore.saves][-2:] == [1, 2]


async def test_a_failing_store_is_503_with_a_clear_body_then_recovers() -> None:
    async with serve_in_process(app_for_class(Env)) as http:
        client = RolloutClient(http)
        await client.call("/seed_session", {})
        FlakyStore.down = True
        for path in ("/add", "/seed_session"):
            response = await client.post(path, {})
            assert response.status_code == 503
            assert response.headers["retry-after"] == "1"
            assert response.json() == {
                "detail": "session store unavailable: store at flaky://x failed to answer: connection refused"
            }
        assert (await http.get("/health")).status_code == 503
        FlakyStore.down = False
        assert await client.call("/add") == {"n": 1}


async def test_a_store_that_fills_up_under_a_race_is_503_not_500() -> None:
    async with serve_in_process(app_for_class(Env)) as http:
        FlakyStore.full = True
        response = await RolloutClient(http).post("/seed_session", {})
        assert response.status_code == 503 and "session limit" in response.json()["detail"]


def test_workers_of_one_run_share_a_made_up_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NGYM_SESSION_SECRET", raising=False)
    share_secret_between_workers(ServeSpec(target="x:Y", name="x"), workers=1)
    assert "NGYM_SESSION_SECRET" not in os.environ
    share_secret_between_workers(ServeSpec(target="x:Y", name="x", fields={"session_secret": "mine"}), workers=2)
    assert "NGYM_SESSION_SECRET" not in os.environ
    share_secret_between_workers(ServeSpec(target="x:Y", name="x"), workers=3)
    made = os.environ["NGYM_SESSION_SECRET"]
    assert len(made) >= 32
    share_secret_between_workers(ServeSpec(target="x:Y", name="x"), workers=3)
    assert os.environ["NGYM_SESSION_SECRET"] == made  # an existing one is kept


def test_the_session_secret_can_come_from_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """``NGYM_SESSION_SECRET_FILE`` (a Docker or Kubernetes secret mounted read-only) gives the secret without
    putting it in any process environment (``docker inspect`` shows a container's); ``--workers`` keeps it."""
    from ngym.errors import ConfigError
    from ngym.server.sessions.cookies import resolve_secret

    monkeypatch.delenv("NGYM_SESSION_SECRET", raising=False)
    secret_file = tmp_path / "session_secret"
    secret_file.write_text("from-a-mounted-file-0123456789\n")
    monkeypatch.setenv("NGYM_SESSION_SECRET_FILE", str(secret_file))
    assert resolve_secret(None) == ("from-a-mounted-file-0123456789", True)
    assert resolve_secret("configured-wins") == ("configured-wins", True)
    share_secret_between_workers(ServeSpec(target="x:Y", name="x"), workers=2)
    assert "NGYM_SESSION_SECRET" not in os.environ  # the workers read the same file
    for content, problem in (("  \n", "is empty"), (None, "cannot read it")):
        if content is None:
            secret_file.unlink()
        else:
            secret_file.write_text(content)
        with pytest.raises(ConfigError, match=f"NGYM_SESSION_SECRET_FILE=.*{problem}"):
            resolve_secret(None)
