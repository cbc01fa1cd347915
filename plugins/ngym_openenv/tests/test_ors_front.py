"""An installed OpenEnv environment over the ORS front (``/ors``): the same session and reward as NeMo Gym's wire.

The environment is tests/envs/tally_env (MCP tool ``add``), run by OpenEnv 0.10.0 behind ngym.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from ngym_openenv.install import prepare
from ngym_openenv.manifest import Manifest
from ngym_openenv.server import server_class

from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process

TALLY = Path(__file__).with_name("envs") / "tally_env"


@pytest.fixture(scope="module")
def tally(openenv_python: str) -> Manifest:
    return prepare(str(TALLY), options={"python": openenv_python}, echo=lambda _: None)


def _answer(response: httpx.Response) -> Any:
    data = [line[6:] for line in response.text.split("\r\n") if line.startswith("data: ")]
    return json.loads("".join(data[1:]))


async def test_an_openenv_environment_over_ors_scores_as_over_nemo_gyms_wire(tally: Manifest) -> None:
    app = app_for_class(server_class(tally), name="tally_env", reward_rule="state:total_reward")
    async with serve_in_process(app) as http:
        nemo = RolloutClient(http)
        await nemo.call("/seed_session", {"episode_id": "ep-nemo"})
        for n in (3, 7):
            await nemo.call("/add", {"n": n})
        row = {"responses_create_params": {"input": "add"}}
        nemo_reward = (await nemo.call("/verify", {**row, "response": make_response("done")}))["reward"]

        tools = {t["name"]: t for t in (await http.get("/ors/tools")).json()["tools"]}
        assert tools["add"]["input_schema"]["properties"]["n"]["type"] == "integer"  # the MCP tool's own schema
        opened = await http.post("/ors/create_session")
        sid = {"x-session-id": opened.text.split("\r\n")[1][6:]}
        created = await http.post("/ors/create", json={"task_spec": {**row, "episode_id": "ep-ors"}}, headers=sid)
        assert created.status_code == 200, created.text
        for n in (3, 7):
            step = await http.post("/ors/call", json={"name": "add", "input": {"n": n}}, headers=sid)
            assert _answer(step)["ok"] is True
        done = _answer(
            await http.post("/ors/call", json={"name": "submit_answer", "input": {"answer": "done"}}, headers=sid)
        )
        await http.post("/ors/delete", headers=sid)
        assert done["output"]["finished"] is True
        assert done["output"]["reward"] == pytest.approx(nemo_reward) and nemo_reward == pytest.approx(1.3)
        assert (await http.get("/health")).json()["live_sessions"] == 0
