"""An OpenEnv MCP environment served by ngym: tools as routes, episode ids passed through, close() once, the
environment's concurrency limit, reward rules, masking when there is no reward or the episode is lost, and an
OpenEnv server fronted by URL. The environment is tests/envs/tally_env (MCP tool ``add``), run by OpenEnv 0.10.0.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from ngym_openenv import launch
from ngym_openenv.install import OpenEnvInstallError, prepare
from ngym_openenv.manifest import Manifest
from ngym_openenv.server import server_class
from ngym_openenv.side_by_side import compare

from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process

TALLY = Path(__file__).with_name("envs") / "tally_env"
STEPS = Path(__file__).with_name("envs") / "steps_env"
VERIFY = {"responses_create_params": {"input": "x"}, "response": make_response("done")}


@pytest.fixture(scope="module")
def tally(openenv_python: str) -> Manifest:
    return prepare(str(TALLY), options={"python": openenv_python}, echo=lambda _: None)


def test_install_reads_tools_domain_and_concurrency(tally: Manifest) -> None:
    assert tally.tool_mode == "mcp"
    assert [t.name for t in tally.tools] == ["add"]
    assert tally.tools[0].input_schema["properties"]["n"]["type"] == "integer"
    assert tally.domain == "games"  # openenv.yaml's domain:
    assert tally.supports_concurrent_sessions is True and tally.max_concurrent_envs == 2
    assert tally.requires_single_thread_executor is False


async def test_one_server_many_rollouts(tally: Manifest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One ngym server (one OpenEnv server behind it: each start costs seconds), several rollouts in turn."""
    closes = tmp_path / "closes.txt"
    monkeypatch.setenv("TALLY_CLOSE_LOG", str(closes))  # inherited by the OpenEnv server ngym starts
    app = app_for_class(server_class(tally), name="tally_env", reward_rule="state:total_reward")
    async with serve_in_process(app) as http:
        # tools as routes; reset got the episode id; the environment's declared reward (state:total_reward)
        rollout = RolloutClient(http)
        seed = await rollout.call("/seed_session", {"episode_id": "ep-1"})
        assert seed["episode_id"] == "ep-1" and seed["reward"] == 0.0 and seed["done"] is False
        first = await rollout.call("/add", {"n": 3})
        assert first["observation"]["tool_name"] == "add" and first["reward"] == pytest.approx(0.3)
        second = await rollout.call("/add", {"n": 7})
        assert second["reward"] == 1.0 and second["done"] is True
        verify = await rollout.call("/verify", VERIFY)
        assert verify["reward"] == pytest.approx(1.3) and verify["reward_rule"] == "state:total_reward"
        assert verify["mask_sample"] is False and verify["episode_done"] is True and verify["steps"] == 2
        await rollout.call("/close_session", {})  # already closed after verify: no second close()
        await _until(lambda: closes.is_file() and closes.read_text().split() == ["ep-1"])

        # seeding a live session again: ngym closes the old session, so its episode ends (close() once) first
        again = RolloutClient(http)
        await again.call("/seed_session", {"episode_id": "ep-r1"})
        await again.call("/seed_session", {"episode_id": "ep-r2"})
        await _until(lambda: "ep-r1" in closes.read_text().split())
        await again.call("/close_session", {})
        await _until(lambda: "ep-r2" in closes.read_text().split())

        # the environment's own limit (max_concurrent_envs=2): a third live episode is 503 until one ends
        rollouts = [RolloutClient(http) for _ in range(3)]
        for index, other in enumerate(rollouts[:2]):
            await other.call("/seed_session", {"episode_id": f"ep-{index + 2}"})
        third = await rollouts[2].post("/seed_session", {"episode_id": "ep-4"})
        assert third.status_code == 503 and "max_concurrent_envs" in third.json()["detail"]
        assert third.headers["retry-after"]
        await rollouts[0].call("/close_session", {})
        await _until(lambda: "ep-2" in closes.read_text().split())  # OpenEnv frees the slot as the socket ends
        assert (await rollouts[2].post("/seed_session", {"episode_id": "ep-4"})).status_code == 200

        # no step taken: the environment's state still declares its total (0.0), which is the reward
        verify = await rollouts[1].call("/verify", VERIFY)
        assert verify["reward"] == 0.0 and verify["mask_sample"] is False and verify["steps"] == 0

        # the OpenEnv server dies mid-episode: tools answer 410, verify is masked as session_lost
        lost = rollouts[2]
        await lost.call("/add", {"n": 1})
        process = app.state.openenv.process
        process.process.kill()
        process.process.wait()
        gone = await lost.post("/add", {"n": 1})
        assert gone.status_code == 410 and "lost" in gone.json()["detail"]
        verify = await lost.call("/verify", VERIFY)
        assert verify["mask_sample"] is True and verify["failure_kind"] == "session_lost"
    assert closes.read_text().split().count("ep-1") == 1  # close() ran once for the verified episode


async def _until(condition: Any, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.1)):
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


async def test_a_remote_server_by_url(tally: Manifest, openenv_python: str) -> None:
    running = launch.start(openenv_python, "server.app:app", app_dir=tally.app_dir)
    try:
        remote = await asyncio.to_thread(
            lambda: prepare(running.url, as_name="tally_remote", domain="games", echo=lambda _: None)
        )
        assert remote.url == running.url and remote.python is None and [t.name for t in remote.tools] == ["add"]
        app = app_for_class(server_class(remote), name="tally_remote")
        async with serve_in_process(app) as http:
            # the default rule, last: no step taken is nothing to measure, so masked and said why (never a silent 0)
            idle = RolloutClient(http)
            await idle.call("/seed_session", {})
            verify = await idle.call("/verify", VERIFY)
            assert verify["reward"] == 0.0 and verify["mask_sample"] is True
            assert verify["failure_kind"] == "verifier_error" and "no step was taken" in verify["failure_reason"]

            rollout = RolloutClient(http)
            await rollout.call("/seed_session", {})
            assert (await rollout.call("/add", {"n": 10}))["reward"] == 1.0
            verify = await rollout.call("/verify", VERIFY)
            assert verify["reward"] == 1.0 and verify["mask_sample"] is False
    finally:
        running.stop()


def test_unreachable_url_is_one_clear_error() -> None:
    with pytest.raises(OpenEnvInstallError, match="cannot reach the OpenEnv server"):
        prepare("http://127.0.0.1:9", as_name="nothing", domain="games", echo=lambda _: None)


def test_schema_route_documents_the_tool(tally: Manifest) -> None:
    app = app_for_class(server_class(tally), name="tally_env")
    schema = app.openapi()
    body = schema["paths"]["/add"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["n"]["type"] == "integer"
    assert httpx  # the client library the tests share


async def test_a_folder_laid_out_like_openenvs_own_envs(openenv_python: str) -> None:
    """OpenEnv's envs/ (grid_world_env): relative imports only, and a project this Python cannot install."""
    said: list[str] = []
    manifest = await asyncio.to_thread(
        lambda: prepare(str(STEPS), options={"python": openenv_python, "reward_rule": "sum"}, echo=said.append)
    )
    assert any("requires Python >=3.99" in line and "server/requirements.txt" in line for line in said), said
    assert manifest.app == "steps_env.server.app:app" and manifest.tool_mode == "step"
    assert manifest.app_dir and Path(manifest.app_dir, "steps_env", "models.py").is_file()
    # the example made from its schema: the enum's first value, stepped twice, its reward repeated
    assert manifest.example_rollouts[0]["reward"] == 0.5
    assert json.loads(manifest.example_rollouts[0]["response"]["output"][0]["arguments"]) == {"move": "FORWARD"}

    app = app_for_class(server_class(manifest), name=manifest.name)
    async with serve_in_process(app) as http:
        rollout = RolloutClient(http)
        assert (await rollout.call("/seed_session", {}))["observation"]["position"] == 0
        for move in ("FORWARD", "BACK", "FORWARD", "FORWARD", "FORWARD"):
            answer = await rollout.call("/step", {"move": move})
        assert answer["done"] is True and answer["observation"]["position"] == 3
        verify = await rollout.call("/verify", VERIFY)
    assert verify["step_rewards"] == [0.5, -0.1, 0.5, 0.5, 1.0] and verify["reward"] == pytest.approx(2.4)

    # side by side (what `make openenv-sweep` runs on OpenEnv's own folders): OpenEnv's client against OpenEnv's
    # server and ngym, install's example action three times; no client.py here, so OpenEnv's generic client
    found = await asyncio.to_thread(compare, server_class(manifest))
    assert found.client == "openenv.core.generic_client:GenericEnvClient", found
    assert found.fallback and "steps_env" in found.fallback
    assert found.problem is None and found.deterministic
    assert [r["wire_reward"] for r in found.openenv] == [0.0, 0.5, 0.5, 1.0] and found.openenv[-1]["done"] is True
    assert found.equal == 4 and found.ngym == found.openenv
    assert found.verify_reward == found.expected_reward == pytest.approx(2.0) and found.same  # the sum rule
