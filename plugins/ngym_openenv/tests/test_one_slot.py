"""An OpenEnv environment that runs one episode at a time (``max_concurrent_envs=1``, like openenv-dipg-safety):
a seed waits for the slot, then a clear 503; a pool of servers (``instances``); an abandoned seed is reclaimed by
the idle sweep; the servers ngym starts listen on a private unix socket, no TCP port. The environment is
tests/envs/tally_env run with ``TALLY_MAX_ENVS=1``, by OpenEnv 0.10.0.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ngym_openenv.install import prepare
from ngym_openenv.manifest import Manifest
from ngym_openenv.server import OpenEnvConfig, OpenEnvServer, server_class

from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process

TALLY = Path(__file__).with_name("envs") / "tally_env"
VERIFY = {"responses_create_params": {"input": "x"}, "response": make_response("done")}


@pytest.fixture(scope="module")
def one_slot(openenv_python: str) -> Manifest:
    """tally_env declaring max_concurrent_envs=1 (its app reads $TALLY_MAX_ENVS, which the manifest passes on)."""
    manifest = prepare(str(TALLY), options={"python": openenv_python}, echo=lambda _: None)
    return manifest.model_copy(
        update={"name": "tally_one", "max_concurrent_envs": 1, "env": {**manifest.env, "TALLY_MAX_ENVS": "1"}}
    )


async def _until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def _server(app: Any) -> OpenEnvServer:
    server: OpenEnvServer = app.state.openenv
    return server


async def test_a_second_seed_waits_for_the_slot_then_503(one_slot: Manifest) -> None:
    app = app_for_class(server_class(one_slot), name="tally_one", seed_wait_seconds=120)
    async with serve_in_process(app) as http:
        first, second = RolloutClient(http), RolloutClient(http)
        await first.call("/seed_session", {"episode_id": "a"})
        assert (await first.call("/add", {"n": 2}))["reward"] == pytest.approx(0.2)
        waiting = asyncio.create_task(second.post("/seed_session", {"episode_id": "b"}))
        pool = getattr(_server(app), "pool", None)
        await _until(lambda: waiting.done() or (pool is not None and pool.waiting == 1))
        assert not waiting.done(), waiting.result().text  # the second seed waits for the one slot
        await first.call("/close_session", {})
        answer = await asyncio.wait_for(waiting, timeout=120)
        assert answer.status_code == 200 and answer.json()["episode_id"] == "b"
        assert (await second.call("/add", {"n": 10}))["done"] is True

        # nobody closes: a seed waiting seed_wait_seconds gets one clear 503 saying what to raise
        app.state.openenv.config.seed_wait_seconds = 0.2
        refused = await RolloutClient(http).post("/seed_session", {"episode_id": "c"})
        assert refused.status_code == 503 and refused.headers["retry-after"]
        detail = refused.json()["detail"]
        assert "allows 1 episode(s) at once" in detail and "raise instances" in detail, detail
        assert (await second.call("/verify", VERIFY))["reward"] == 1.0  # the live one is untouched


async def test_more_rollouts_than_slots_all_run_in_turn(one_slot: Manifest) -> None:
    """Six rollouts at once on one slot: each seed waits for the previous rollout's close, none is refused."""
    app = app_for_class(server_class(one_slot), name="tally_one", seed_wait_seconds=300)

    async def rollout(http: Any, index: int) -> float:
        client = RolloutClient(http)
        await client.call("/seed_session", {"episode_id": f"r{index}"})
        await client.call("/add", {"n": index})
        reward: float = (await client.call("/verify", VERIFY))["reward"]  # verify closes the session
        return reward

    async with serve_in_process(app) as http:
        rewards = await asyncio.gather(*(rollout(http, index) for index in range(1, 7)))
        assert rewards == pytest.approx([index / 10 for index in range(1, 7)])
        pool = _server(app).pool
        assert pool is not None and pool.live == 0 and pool.waiting == 0


async def test_instances_run_that_many_episodes_at_once(one_slot: Manifest) -> None:
    app = app_for_class(server_class(one_slot), name="tally_one", instances=2, seed_wait_seconds=0.2)
    async with serve_in_process(app) as http:
        rollouts = [RolloutClient(http) for _ in range(3)]
        seeds = await asyncio.gather(
            *(r.post("/seed_session", {"episode_id": f"e{i}"}) for i, r in enumerate(rollouts[:2]))
        )
        assert [s.status_code for s in seeds] == [200, 200], [s.text for s in seeds]
        assert len(_server(app).processes) == 2
        for index, rollout in enumerate(rollouts[:2]):
            assert (await rollout.call("/add", {"n": index + 1}))["reward"] == pytest.approx((index + 1) / 10)
        third = await rollouts[2].post("/seed_session", {"episode_id": "e2"})
        assert third.status_code == 503 and "2 server(s)" in third.json()["detail"]
        await rollouts[0].call("/close_session", {})  # its slot is free again
        _server(app).config.seed_wait_seconds = 60
        assert (await rollouts[2].post("/seed_session", {"episode_id": "e2"})).status_code == 200
        assert (await rollouts[1].call("/verify", VERIFY))["reward"] == pytest.approx(0.2)


async def test_an_abandoned_seed_is_reclaimed_by_the_idle_sweep(one_slot: Manifest) -> None:
    app = app_for_class(server_class(one_slot), name="tally_one", session_ttl_seconds=0.5, seed_wait_seconds=120)
    async with serve_in_process(app) as http:
        abandoned = RolloutClient(http)
        await abandoned.call("/seed_session", {"episode_id": "gone"})  # and never closed
        later = await RolloutClient(http).post("/seed_session", {"episode_id": "next"})
        assert later.status_code == 200 and later.json()["episode_id"] == "next"
        gone = await abandoned.post("/add", {"n": 1})
        assert gone.status_code == 410  # its session expired; it holds no slot
    assert OpenEnvConfig.model_fields["session_ttl_seconds"].default == 300.0  # not the generic 3,600 s


async def test_the_inner_server_listens_on_a_private_unix_socket_only(one_slot: Manifest) -> None:
    app = app_for_class(server_class(one_slot), name="tally_one")
    async with serve_in_process(app) as http:
        process = _server(app).process
        assert process is not None
        assert _tcp_listening(process.process.pid) == set()
        assert process.uds is not None
        folder = Path(process.uds).parent
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_ISSOCK(Path(process.uds).stat().st_mode)
        rollout = RolloutClient(http)
        await rollout.call("/seed_session", {})
        assert (await rollout.call("/add", {"n": 4}))["reward"] == pytest.approx(0.4)
    assert not folder.exists()  # stopped with the ngym server


def _tcp_listening(pid: int) -> set[str]:
    """The TCP sockets (IPv4 or IPv6) process ``pid`` listens on, as /proc/net/tcp's local addresses."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target.removeprefix("socket:[").rstrip("]"))
    listening = set()
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        for line in path.read_text().splitlines()[1:] if path.exists() else []:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                listening.add(fields[1])
    return listening
