"""Which ORS session ids a worker takes: its own (by their hash) and well-formed ones, as a typed seed's."""

from __future__ import annotations

import time

import httpx
import pytest

from ngym.server.fronts.ors.episodes import RESUMABLE_BYTES
from ngym.server.sessions.routing import ROUTE_SLOT_ENV, RouteSlot
from ngym.testing import app_for, serve_in_process

CREATE = {"split": "example", "index": 0}


async def _create(http: httpx.AsyncClient, sid: str) -> httpx.Response:
    return await http.post("/ors/create", json=CREATE, headers={"x-session-id": sid})


async def test_a_worker_refuses_a_create_for_another_workers_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind ``--workers 2`` a ``/create`` reaches the worker its id hashes to, unless that one is down: then the
    other one refuses it (503) instead of seeding a session no later request of that id reaches (it held one until
    the TTL, and the owner answered 404 once back)."""
    monkeypatch.setenv(ROUTE_SLOT_ENV, "0/2")
    mine, theirs = RouteSlot.parse("0/2").new_id(), RouteSlot.parse("1/2").new_id()
    async with serve_in_process(app_for("example_single_tool_call")) as http:
        assert (await _create(http, mine)).status_code == 200
        refused = await _create(http, theirs)
        assert refused.status_code == 503 and "belongs to another worker" in refused.json()["detail"]
        call = {"name": "get_weather", "input": {"city": "Oslo"}}
        elsewhere = await http.post("/ors/call", json=call, headers={"x-session-id": theirs})
        assert elsewhere.status_code == 503 and "belongs to another worker" in elsewhere.json()["detail"]
        assert (await http.get("/health")).json()["live_sessions"] == 1


@pytest.mark.parametrize("sid", ["a\tb", "x" * 300, "semi;colon", "<script>"])
async def test_an_ors_session_id_follows_the_servers_session_id_rule(sid: str) -> None:
    """An ORS session id is held in the server's table and logged, as a typed seed's id is: it follows the same
    rule (``session_id_max_length``, ``session_id_pattern``), a 400 naming them (any string was taken)."""
    async with serve_in_process(app_for("example_single_tool_call")) as http:
        refused = await _create(http, sid)
        assert refused.status_code == 400 and "session_id_max_length" in refused.json()["detail"], refused.text
        assert (await http.get("/health")).json()["live_sessions"] == 0


async def test_an_abandoned_episode_is_let_go_with_its_expired_session() -> None:
    """An ORS session a client leaves (no ``/delete``, no more requests) is let go, its row and trajectory with
    it, by the server's own session sweep: no new ``/create`` is needed (its trajectory stayed until one came:
    6 abandoned episodes of 9 MB each kept 290 MB after their sessions expired, 173 MB once let go)."""
    app = app_for("example_single_tool_call", session_ttl_seconds=60)
    async with serve_in_process(app) as http:
        sid = RouteSlot().new_id()
        assert (await _create(http, sid)).status_code == 200
        call = {"name": "get_weather", "input": {"city": "Oslo"}}
        assert (await http.post("/ors/call", json=call, headers={"x-session-id": sid})).status_code == 200
        episodes = app.state.ngym_fronts["ors"].episodes
        sessions = episodes.server.sessions
        later = time.monotonic() + 120  # two TTLs from now, for the store and the episode alike
        sessions.store._clock = lambda: later
        episodes.find(sid).last_used -= 120
        await sessions.sweep()
        assert len(episodes) == 0
        assert (await http.get("/health")).json()["live_sessions"] == 0


async def test_an_episode_keeps_only_its_last_large_answer_for_a_resumed_call() -> None:
    """A call's answer is kept for a client resuming its cut stream; an earlier one past ``RESUMABLE_BYTES`` is let
    go when the next call starts (four answers of up to 16 MiB each were kept beside the trajectory: three sessions
    of large searches grew the server by 60-130 MB each)."""
    app = app_for("workplace_assistant")
    async with serve_in_process(app) as http:
        sid = RouteSlot().new_id()
        assert (await _create(http, sid)).status_code == 200
        headers = {"x-session-id": sid}
        email = {"recipient": "a@b.com", "subject": "s", "body": "x" * 100_000}
        await http.post("/ors/call", json={"name": "email_send_email", "input": email}, headers=headers)
        search = {"name": "email_search_emails", "input": {"query": "x"}}
        answers = [await http.post("/ors/call", json=search, headers=headers) for _ in range(3)]
        episode = app.state.ngym_fronts["ors"].episodes.find(sid)
        sizes = [len(result.result()) for result in episode.results.values()]
        assert len(sizes) == 2 and sum(size > RESUMABLE_BYTES for size in sizes) == 1, sizes
        task_id = answers[-1].text.split("\r\n")[1][6:]
        again = await http.post("/ors/call", json={**search, "task_id": task_id}, headers=headers)
        assert again.text.split("\r\n")[4:] == answers[-1].text.split("\r\n")[4:]  # the same answer, resumed
