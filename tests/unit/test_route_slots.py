"""Routing slots: a session id names the process that holds it (``crc32(id) mod N``), and a process of a set acts
only on its own ids (``ngym.server.sessions.routing``)."""

from __future__ import annotations

import zlib

import pytest

from ngym.errors import ConfigError
from ngym.server.sessions.cookies import CookieSigner
from ngym.server.sessions.routing import ROUTE_SLOT_ENV, RouteSlot, slot_of
from ngym.testing import RolloutClient, app_for, make_response, serve_in_process

SECRET = "s" * 32


def test_slots_parse_and_nest() -> None:
    assert RouteSlot.parse("1/2") == RouteSlot(((1, 2),))
    assert str(RouteSlot.parse("1/2,0/3")) == "1/2,0/3" and RouteSlot.parse("1/2,0/3").count == 6
    for bad in ("2/2", "-1/2", "x/2", "1", "1/0", "0/2,"):
        with pytest.raises(ConfigError, match=ROUTE_SLOT_ENV):
            RouteSlot.parse(bad)
    assert RouteSlot().owns("anything") and RouteSlot().count == 1


def test_an_id_made_by_a_slot_routes_back_to_it_at_every_level() -> None:
    for text in ("0/2", "1/2", "2/3", "1/2,0/3", "0/3,1/2"):
        slot = RouteSlot.parse(text)
        stride = 1
        ids = [slot.new_id() for _ in range(50)]
        for index, count in slot.levels:
            assert all(slot_of(i, count, stride) == index for i in ids)
            assert all((zlib.crc32(i.encode()) // stride) % count == index for i in ids)  # HAProxy's crc32,div,mod
            stride *= count
        assert len(set(ids)) == 50


def _id_of_slot(index: int, count: int) -> str:
    return RouteSlot(((index, count),)).new_id()


def _typed(session_id: str) -> dict[str, object]:
    return {
        "resources_session_id": session_id,
        "episode_id": {"rollout_id": "r", "attempt": 0},
        "task_id": {"taskset": "t", "task_id": "1"},
        "task_data": {"initial_count": 3},
    }


async def test_a_worker_acts_only_on_the_sessions_of_its_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROUTE_SLOT_ENV, "0/2")
    async with serve_in_process(app_for("example_session_state_mgmt", session_secret=SECRET)) as http:
        own = RolloutClient(http)
        await own.call("/seed_session", {"initial_count": 1})
        assert own.cookie is not None
        session_id = own.cookie.partition("=")[2].rpartition(".")[0]
        assert slot_of(session_id, 2) == 0  # the id it made routes back to it

        # a validly signed cookie of slot 1's session: this worker holds nothing of it (never serves it as its own)
        foreign = {"cookie": f"ngym_session={CookieSigner(SECRET, 'ngym_session').sign(_id_of_slot(1, 2))}"}
        tool = await http.post("/increment_counter", json={"count": 1}, headers=foreign)
        assert tool.status_code == 410 and "set-cookie" not in tool.headers
        row = {"responses_create_params": {"input": "x"}, "initial_count": 1, "expected_count": 1}
        verify = (await http.post("/verify", json={**row, "response": make_response()}, headers=foreign)).json()
        assert verify["mask_sample"] is True and verify["failure_kind"] == "session_lost"

        # a typed seed or close of another slot's id is refused, never honoured here
        other = _id_of_slot(1, 2)
        for path, body in (("/seed_session", _typed(other)), ("/close_session", _typed(other))):
            if path == "/close_session":
                body = {k: body[k] for k in ("resources_session_id", "episode_id")}
            answer = await http.post(path, json=body)
            assert answer.status_code == 503 and "another worker" in answer.json()["detail"], answer.text
            assert "set-cookie" not in answer.headers
        mine = _id_of_slot(0, 2)
        assert (await http.post("/seed_session", json=_typed(mine))).status_code == 200
        close = {k: _typed(mine)[k] for k in ("resources_session_id", "episode_id")}
        assert (await http.post("/close_session", json=close)).status_code == 200
        assert (await own.call("/get_counter_value")) == {"count": 1}


async def test_one_process_alone_holds_every_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ROUTE_SLOT_ENV, raising=False)
    async with serve_in_process(app_for("example_session_state_mgmt")) as http:
        for n in range(8):  # ids of every slot of any set: all this process's own
            assert (await http.post("/seed_session", json=_typed(f"any-{n}"))).status_code == 200


def test_a_bad_slot_setting_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROUTE_SLOT_ENV, "3/2")
    with pytest.raises(ConfigError, match="NGYM_ROUTE_SLOT='3/2'"):
        app_for("example_session_state_mgmt")
