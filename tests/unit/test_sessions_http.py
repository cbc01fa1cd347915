"""Sessions over HTTP: cookies copied by hand, isolation, tampering, lifecycle, both seed flows."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import httpx

from ngym.testing import RolloutClient, app_for, make_response, read_jsonl, serve_in_process

COUNTER_DATA = Path(__file__).parents[2] / "resources_servers/example_session_state_mgmt/data/example.jsonl"


def typed_seed(session_id: str, rollout: str = "r1", row: dict | None = None) -> dict:
    return {
        "resources_session_id": session_id,
        "episode_id": {"rollout_id": rollout, "attempt": 0},
        "task_id": {"taskset": "t", "task_id": "1"},
        "task_data": row or {"initial_count": 5},
    }


async def test_only_a_seed_hands_out_a_cookie_and_it_carries_the_session(counter_http: httpx.AsyncClient) -> None:
    rollout = RolloutClient(counter_http)
    seeded = await rollout.post("/seed_session", {"initial_count": 2})
    assert seeded.status_code == 200 and seeded.json() == {}
    first_cookie = rollout.cookie
    assert first_cookie and first_cookie.startswith("ngym_session=")
    incremented = await rollout.post("/increment_counter", {"count": 5})
    # a successful answer of the live session repeats the very cookie it came with (NeMo Gym clients copy it)
    assert incremented.headers.get("set-cookie", "").split(";")[0] == first_cookie
    assert (await rollout.call("/get_counter_value")) == {"count": 7}
    assert rollout.cookie == first_cookie
    # a 404, a 410 and a cookie-less call set none either: no answer but a seed hands out a session
    missing = await counter_http.post("/nonexistent", json={}, headers={"cookie": first_cookie})
    assert missing.status_code == 404 and "set-cookie" not in missing.headers
    bare = await counter_http.post("/get_counter_value", json={})
    assert bare.status_code == 409 and "set-cookie" not in bare.headers
    await rollout.call("/close_session", {})
    gone = await counter_http.post("/increment_counter", json={"count": 1}, headers={"cookie": first_cookie})
    assert gone.status_code == 410 and "set-cookie" not in gone.headers


async def test_two_session_cookies_in_one_request_are_400(counter_http: httpx.AsyncClient) -> None:
    one, two = RolloutClient(counter_http), RolloutClient(counter_http)
    await one.call("/seed_session", {"initial_count": 1})
    await two.call("/seed_session", {"initial_count": 2})
    assert one.cookie and two.cookie
    for cookie in (f"{one.cookie}; {two.cookie}", f"a=1; {two.cookie};{one.cookie}", f"{one.cookie}; {one.cookie}"):
        answer = await counter_http.post("/increment_counter", json={"count": 1}, headers={"cookie": cookie})
        assert answer.status_code == 400 and "more than one ngym_session" in answer.json()["detail"], answer.text
    # two Cookie headers (HTTP/2 may split them) count as one list
    split = await counter_http.post(
        "/increment_counter", json={"count": 1}, headers=[("cookie", one.cookie), ("cookie", two.cookie)]
    )
    assert split.status_code == 400
    assert (await one.call("/get_counter_value")) == {"count": 1}
    assert (await two.call("/get_counter_value")) == {"count": 2}


async def test_two_hundred_concurrent_rollouts_never_see_each_other(counter_http: httpx.AsyncClient) -> None:
    rng = random.Random(7)

    async def one(i: int) -> tuple[float, int]:
        rollout = RolloutClient(counter_http)
        increments = [rng.randint(-5, 9) for _ in range(rng.randint(0, 4))]
        row = {
            "responses_create_params": {"input": "count"},
            "initial_count": i,
            "expected_count": i + sum(increments),
        }
        await rollout.call("/seed_session", row)
        for n in increments:
            await asyncio.sleep(0)  # interleave with the other rollouts
            await rollout.call("/increment_counter", {"count": n})
        value = (await rollout.call("/get_counter_value"))["count"]
        response = make_response(response_id=f"r{i}")
        verified = await rollout.call("/verify", {**row, "response": response})
        return verified["reward"], value - (i + sum(increments))

    results = await asyncio.gather(*(one(i) for i in range(200)))
    assert all(reward == 1.0 for reward, _ in results)
    assert all(drift == 0 for _, drift in results)
    health = (await counter_http.get("/health")).json()
    assert health["live_sessions"] == 0  # verify closed every session


async def test_tampered_or_foreign_cookie_is_no_session(counter_http: httpx.AsyncClient) -> None:
    victim = RolloutClient(counter_http)
    await victim.call("/seed_session", {"initial_count": 41})
    assert victim.cookie is not None
    session_id, _, signature = victim.cookie.partition("=")[2].partition(".")
    forged = f"ngym_session={session_id}.{signature[::-1]}"
    response = await counter_http.post("/get_counter_value", json={}, headers={"cookie": forged})
    assert response.status_code == 409
    assert "seed_session" in response.json()["detail"]
    # The forged request was handed no session at all (only a seed sets a cookie), never the victim's.
    assert "set-cookie" not in response.headers
    assert (await victim.call("/get_counter_value")) == {"count": 41}


async def test_cookie_signed_by_another_server_is_rejected() -> None:
    async with (
        serve_in_process(app_for("example_session_state_mgmt", session_secret="a" * 32)) as one,
        serve_in_process(app_for("example_session_state_mgmt", session_secret="b" * 32)) as two,
    ):
        rollout = RolloutClient(one)
        await rollout.call("/seed_session", {"initial_count": 1})
        response = await two.post("/get_counter_value", json={}, headers={"cookie": rollout.cookie or ""})
        assert response.status_code == 409


async def test_tool_without_seed_is_a_clear_4xx(counter_http: httpx.AsyncClient) -> None:
    response = await counter_http.post("/increment_counter", json={"count": 1})
    assert response.status_code == 409
    assert "POST /seed_session" in response.json()["detail"]


async def test_close_session_frees_state_and_reports_it(counter_http: httpx.AsyncClient) -> None:
    rollout = RolloutClient(counter_http)
    await rollout.call("/seed_session", {"initial_count": 1})
    assert (await counter_http.get("/health")).json()["live_sessions"] == 1
    assert (await rollout.call("/close_session"))["closed"] is True
    assert (await rollout.call("/close_session"))["closed"] is False
    assert (await rollout.post("/get_counter_value")).status_code == 410  # closed: gone (ngym.server.sessions.lost)
    assert (await counter_http.get("/health")).json()["live_sessions"] == 0


async def test_idle_sessions_expire_and_run_the_close_hook() -> None:
    app = app_for("example_session_state_mgmt", session_ttl_seconds=0.2)
    async with serve_in_process(app) as http:
        rollout = RolloutClient(http)
        await rollout.call("/seed_session", {"initial_count": 1})
        await asyncio.sleep(0.6)
        assert (await http.get("/health")).json()["live_sessions"] == 0
        assert (await rollout.post("/get_counter_value")).status_code == 410  # expired: gone (sessions.lost)


async def test_session_bound_gives_503_with_retry_after() -> None:
    async with serve_in_process(app_for("example_session_state_mgmt", max_sessions=3)) as http:
        clients = [RolloutClient(http) for _ in range(4)]
        for client in clients[:3]:
            await client.call("/seed_session", {"initial_count": 0})
        full = await clients[3].post("/seed_session", {"initial_count": 0})
        assert full.status_code == 503
        assert full.headers["retry-after"] == "1"
        assert "session limit" in full.json()["detail"]
        await clients[0].call("/close_session")
        assert (await clients[3].post("/seed_session", {"initial_count": 0})).status_code == 200


async def test_typed_seed_is_idempotent_and_close_prevents_resurrection(counter_http: httpx.AsyncClient) -> None:
    first = RolloutClient(counter_http)
    assert (await first.call("/seed_session", typed_seed("s-1"))) == {"resources_session_id": "s-1"}
    await first.call("/increment_counter", {"count": 3})
    again = RolloutClient(counter_http)
    assert (await again.call("/seed_session", typed_seed("s-1"))) == {"resources_session_id": "s-1"}
    assert (await again.call("/get_counter_value")) == {"count": 8}  # not reset by the repeated seed
    other_episode = await counter_http.post("/seed_session", json=typed_seed("s-1", rollout="r2"))
    assert other_episode.status_code == 409
    close = {"resources_session_id": "s-1", "episode_id": {"rollout_id": "r1", "attempt": 0}}
    assert (await counter_http.post("/close_session", json=close)).json() == {"resources_session_id": "s-1"}
    assert (await counter_http.post("/close_session", json=close)).status_code == 200
    late = await counter_http.post("/seed_session", json=typed_seed("s-1"))
    assert late.status_code == 409 and "closed" in late.json()["detail"]
    never = {"resources_session_id": "never", "episode_id": {"rollout_id": "r9", "attempt": 0}}
    assert (await counter_http.post("/close_session", json=never)).status_code == 200
    assert (await counter_http.post("/seed_session", json=typed_seed("never", rollout="r9"))).status_code == 409


async def test_rollout_prefix_is_stripped(counter_http: httpx.AsyncClient) -> None:
    rollout = RolloutClient(counter_http)
    await rollout.call("/ng-rollout/abc-123/seed_session", {"initial_count": 4})
    assert (await rollout.call("/ng-rollout/abc-123/get_counter_value")) == {"count": 4}


async def test_bad_bodies_are_422_with_field_errors(counter_http: httpx.AsyncClient) -> None:
    bad_seed = await counter_http.post("/seed_session", json={"initial_count": "many"})
    assert bad_seed.status_code == 422
    assert bad_seed.json()["detail"][0]["loc"][-1] == "initial_count"
    rollout = RolloutClient(counter_http)
    await rollout.call("/seed_session", {"initial_count": 0})
    bad_tool = await rollout.post("/increment_counter", {"count": "x"})
    assert bad_tool.status_code == 422
    strict_params = await rollout.post(
        "/verify", {"responses_create_params": {"input": "x", "bogus": 1}, "expected_count": 0, "response": {}}
    )
    assert strict_params.status_code == 422
    assert any("bogus" in json.dumps(err["loc"]) for err in strict_params.json()["detail"])
    not_json = await counter_http.post("/seed_session", content=b"{nope", headers={"content-type": "application/json"})
    assert not_json.status_code == 400


async def test_example_rows_are_valid_seed_bodies(counter_http: httpx.AsyncClient) -> None:
    for row in read_jsonl(COUNTER_DATA):
        rollout = RolloutClient(counter_http)
        await rollout.call("/seed_session", row)
        assert (await rollout.call("/get_counter_value")) == {"count": row["initial_count"]}
