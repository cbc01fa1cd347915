"""``ngym up`` with ``engine: compose``: each environment its own image (built by ``ngym containerize``) and its
own Compose project behind one URL, found by name in the served global config; ``ngym down`` removes them.

The counter environment at 2 replicas (its Compose project: Redis + nginx + the replicas) is driven through the
address the head server gives for its name: a rollout whose calls land on both replicas scores 1.0. After
``down`` no container of the fleet is left. About 1–4 minutes (the image build; warm Docker cache: faster).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import httpx
import yaml

from ngym.fleet.compose import compose_command
from ngym.fleet.state import FleetState

from .conftest import BASE_IMAGE

FLEET = "i20-fleet-compose-test"


def test_a_compose_fleet_serves_each_environment_by_name_and_down_removes_it(
    tmp_path: Path, docker_client: object, base_image: str
) -> None:
    compose_command()  # no Compose tool: a failure (CI installs docker-compose)
    (tmp_path / "fleet.yaml").write_text(
        yaml.safe_dump(
            {
                "name": FLEET,
                "engine": "compose",
                "head_server": {"port": 0},
                "environments": {"counter": {"env": "example_session_state_mgmt", "replicas": 2}},
            }
        )
    )
    env = {**os.environ, "NGYM_FLEET_BASE_IMAGE": BASE_IMAGE, "NGYM_PROGRESS_SECONDS": "20"}

    def ngym(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ngym.cli", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)

    up = ngym("up", "fleet.yaml")
    state = FleetState.load(tmp_path / ".ngym-fleet" / FLEET)
    try:
        assert up.returncode == 0, up.stdout + up.stderr[-3000:]
        assert state is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{state.head.port}/global_config_dict_yaml") as response:
            served = yaml.safe_load(json.loads(response.read()))
        entry = served["counter"]["resources_servers"]["example_session_state_mgmt"]
        url = f"http://{entry['host']}:{entry['port']}"
        with httpx.Client(base_url=url, timeout=30) as http:
            seeded = http.post("/seed_session", json={"initial_count": 1})
            cookie = {"cookie": seeded.headers["set-cookie"].split(";")[0]}
            for _ in range(4):  # nginx spreads these over the 2 replicas: state shared through the project's Redis
                answer = http.post("/increment_counter", json={"count": 1}, headers=cookie)
                assert answer.status_code == 200, answer.text
            verified = http.post(
                "/verify",
                headers=cookie,
                json={"responses_create_params": {"input": "x"}, "response": _response(), "expected_count": 5},
            )
            assert verified.json()["reward"] == 1.0
        status = ngym("status", "fleet.yaml", "--json", "--interval", "0")
        (row,) = [r for r in json.loads(status.stdout) if r["name"] == "counter"]
        assert row["health"] == "ok"
    finally:
        down = ngym("down", "fleet.yaml")
    assert down.returncode == 0, down.stderr
    left = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    assert not [name for name in left.split() if name.startswith(FLEET)]


def _response() -> dict[str, object]:
    return {
        "id": "r", "created_at": 0, "model": "m", "object": "response", "output": [],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }  # fmt: skip
