"""ngym.train.wire: the one client of NeMo Gym's wire that every trainer binding (TRL, verl, SkyRL) uses.

Over real HTTP against the session-state example: a rollout's seed closes the session it still held, one pool
per URL is shared by all rollouts (each its own cookie), the trainer's own trajectory may be verified, and a
masked verify is None.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ngym.rollout.thread_server import serve_app_in_thread
from ngym.testing import app_for, make_response
from ngym.train import wire
from ngym.train.wire import AsyncWire, Rollout, reward_of, sync_wire

TRAIN = Path(__file__).resolve().parents[2] / "ngym" / "train"
ROW = {"responses_create_params": {"input": "count"}, "initial_count": 3, "expected_count": 6}


@pytest.fixture
def counter_url() -> Iterator[str]:
    with serve_app_in_thread(app_for("example_session_state_mgmt")) as url:
        yield url


def live(url: str) -> int:
    return int(httpx.get(f"{url}/health").json()["live_sessions"])


def test_one_module_speaks_nemo_gyms_wire_for_every_trainer() -> None:
    speakers = sorted(p.name for p in TRAIN.glob("*.py") if re.search(r"[\"']/seed_session[\"']", p.read_text()))
    assert speakers == ["wire.py"]
    for binding in ("trl.py", "verl.py", "skyrl.py"):
        assert "from ngym.train.wire import" in (TRAIN / binding).read_text(), binding


def test_seeding_an_open_rollout_closes_its_session_first(counter_url: str) -> None:
    """A rollout seeded again (a trainer reusing its environment) leaves no session behind, on both transports."""
    rollout = Rollout(dict(ROW))
    sync_wire(counter_url).seed(rollout)
    sync_wire(counter_url).seed(rollout)
    assert live(counter_url) == 1

    async def twice() -> None:
        again = Rollout(dict(ROW))
        transport = AsyncWire(counter_url)
        await transport.seed(again)
        await transport.seed(again)

    asyncio.run(twice())
    assert live(counter_url) == 2
    sync_wire(counter_url).close(rollout)
    assert live(counter_url) == 1


def test_rollouts_share_one_pool_and_keep_their_own_sessions(counter_url: str) -> None:
    transport = sync_wire(counter_url)
    assert sync_wire(counter_url + "/") is transport
    first, second = Rollout(dict(ROW)), Rollout({**ROW, "initial_count": 0})
    transport.seed(first)
    transport.seed(second)
    transport.call(first, "increment_counter", {"count": 3})
    assert first.cookies != second.cookies and not transport.http.cookies
    assert reward_of(transport.verify(first, make_response(text="6"))) == 1.0  # the trainer's own trajectory
    assert reward_of(transport.verify(second)) == 0.0  # the rollout's own (no call made: count 0)
    transport.close(first)
    transport.close(second)
    assert live(counter_url) == 0


def test_a_masked_verify_is_no_reward(counter_url: str) -> None:
    transport = sync_wire(counter_url)
    rollout = Rollout(dict(ROW))
    transport.seed(rollout)
    httpx.post(f"{counter_url}/close_session", json={}, headers=wire.cookie_header(rollout.cookies))
    answer = transport.verify(rollout, make_response(text="6"))
    assert answer is not None and answer.get("mask_sample") is True
    assert reward_of(answer) is None
