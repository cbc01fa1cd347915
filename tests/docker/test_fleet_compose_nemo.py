"""``ngym up`` with ``engine: compose`` and a ``nemo-gym:NAME`` entry: the environment is installed in its own
virtualenv (it exists nowhere else), packaged from there into its own image (installing offline from the
wheelhouse built on this machine: containers reach no package index) and served by its Compose project behind one
URL, named in the served global config. NeMo Gym 0.7.0's recorded ``example_multi_step`` rollouts verify in the
container with the rewards NeMo gave them; ``ngym down`` removes every container.

Not in ``make test`` (the image's wheelhouse takes a few minutes on a loaded machine): ``make fleet-compose``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import httpx
import yaml

from ngym.fleet.compose import compose_command
from ngym.fleet.state import FleetState

from .conftest import BASE_IMAGE

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from nemo_envs import verify_payloads  # noqa: E402 (moved here from nemo_replay_inprocess by i23-small)

from ngym.config import cache_root  # noqa: E402

FLEET = "i20r-fleet-compose-nemo"
ENV_NAME = "example_multi_step"


def recorded_cases() -> list[tuple[dict[str, Any], float]]:
    """NeMo Gym 0.7.0's recorded rollouts of the environment as verify bodies, each with NeMo's reward."""
    wheel = next((cache_root() / "nemo-wheel").glob("nemo_gym-0.7.0-*.whl"))
    with zipfile.ZipFile(wheel) as archive:

        def rows(name: str) -> list[dict[str, Any]]:
            text = archive.read(f"resources_servers/{ENV_NAME}/data/{name}").decode()
            return [json.loads(line) for line in text.splitlines() if line.strip()]

        inputs, rollouts = rows("example.jsonl"), rows("example_rollouts.jsonl")
    return [(body, float(r["reward"])) for body, r in zip(verify_payloads(inputs, rollouts), rollouts, strict=True)]


def test_a_compose_fleet_builds_and_serves_a_nemo_gym_entry(
    tmp_path: Path, docker_client: object, base_image: str
) -> None:
    compose_command()  # no Compose tool: a failure (CI installs docker-compose)
    fleet = {
        "name": FLEET,
        "engine": "compose",
        "head_server": {"port": 0},
        "environments": {"steps": "nemo-gym:example_multi_step"},
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    env = {**os.environ, "NGYM_FLEET_BASE_IMAGE": BASE_IMAGE, "NGYM_PROGRESS_SECONDS": "30"}

    def ngym(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ngym.cli", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)

    up = ngym("up", "fleet.yaml")
    state = FleetState.load(tmp_path / ".ngym-fleet" / FLEET)
    try:
        assert up.returncode == 0, up.stdout + up.stderr[-3000:]
        assert state is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{state.head.port}/global_config_dict_yaml") as response:
            served = yaml.safe_load(json.loads(response.read()))
        entry = served["steps"]["resources_servers"][ENV_NAME]
        url = f"http://{entry['host']}:{entry['port']}"
        cases = recorded_cases()
        rewards = [httpx.post(f"{url}/verify", json=body, timeout=60).json()["reward"] for body, _ in cases]
        assert rewards == [expected for _, expected in cases]
        images = subprocess.run(["docker", "images", "--format", "{{.Repository}}"], capture_output=True, text=True)
        assert f"{FLEET}-steps" in images.stdout.split()  # its own image
    finally:
        down = ngym("down", "fleet.yaml")
    assert down.returncode == 0, down.stderr
    left = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    assert not [name for name in left.split() if name.startswith(FLEET)]
