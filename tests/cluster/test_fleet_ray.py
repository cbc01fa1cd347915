"""A fleet placed on a real Ray cluster (``ray start --head`` + 2 worker nodes), one worker node killed mid-run.

Each node is a host of its own: a network namespace (``i20f-h0`` head, ``i20f-h1``, ``i20f-h2``) with a veth on
one bridge (10.220.0.0/24), so the environments listen on their node's address and every call crosses the
"network"; ``ngym up`` runs on the machine (10.220.0.1), the fleet's head server on the head node (the
namespace helpers are shared with the other cluster tests: ``ray_hosts.py``). The cluster: a head with no CPUs
and two worker nodes with one CPU each, so Ray must put each of the two environments on its own worker node.
Rollouts run on both; the node holding the counter environment is killed (its whole process group, SIGKILL)
while rollouts are in flight. Every rollout on the surviving node scores
right; every rollout on the dead node ends as a loud failure (connection error or 5xx), never a wrong reward and
never a hang; ``ngym status`` shows it down; ``ngym down`` leaves nothing. ``make fleet-ray`` runs this (needs
``pip install 'ngym[ray]'``; about a minute).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ngym.fleet.state import FleetState

from .ray_hosts import Cluster, Hosts, ray_cluster

ray = pytest.importorskip("ray", reason="pip install 'ngym[ray]'")
HOSTS = Hosts("i20f", "10.220.0", ["head", "node1", "node2"])
SUBNET = HOSTS.subnet


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    # a head with no CPUs, two worker nodes with one CPU each: each environment on its own worker node
    with ray_cluster(HOSTS, {"node1": ["--num-cpus=1"], "node2": ["--num-cpus=1"]}) as made:
        yield made


def rollout(url: str, expected: int) -> float:
    """One counter rollout (seed 1, three increments, verify) or one weather rollout (expected 0): its reward."""
    with httpx.Client(base_url=url, timeout=20) as http:
        seeded = http.post("/seed_session", json={"initial_count": 1} if expected else {})
        seeded.raise_for_status()
        cookie = {"cookie": seeded.headers["set-cookie"].split(";")[0]}
        body: dict[str, Any] = {"responses_create_params": {"input": "x"}, "response": RESPONSE}
        if not expected:  # weather: 1.0 when the model called get_weather, as the recorded first rollout did
            body = {k: v for k, v in WEATHER_ROLLOUT.items() if k in ("responses_create_params", "response")}
        else:
            for _ in range(3):
                http.post("/increment_counter", json={"count": 1}, headers=cookie).raise_for_status()
                time.sleep(0.05)
            body["expected_count"] = expected
        verified = http.post("/verify", json=body, headers=cookie)
        verified.raise_for_status()
        return float(verified.json()["reward"])


REPO = Path(__file__).resolve().parents[2]
WEATHER_ROLLOUT = json.loads(
    (REPO / "resources_servers/example_single_tool_call/data/example_rollouts.jsonl").read_text().splitlines()[0]
)
RESPONSE = {
    "id": "r", "created_at": 0, "model": "m", "object": "response", "output": [],
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
}  # fmt: skip


def test_a_fleet_on_a_ray_cluster_survives_a_lost_node_without_a_wrong_reward(cluster: Cluster, tmp_path: Path) -> None:
    fleet = {
        "name": "i20-fleet-ray",
        "engine": "ray",
        "ray": {"address": cluster.address},
        "head_server": {"port": 0},
        "environments": {"weather": "example_single_tool_call", "counter": "example_session_state_mgmt"},
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))

    def ngym(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ngym.cli", *args]
        return subprocess.run(command, cwd=tmp_path, env=HOSTS.env, capture_output=True, text=True, timeout=300)

    up = ngym("up", "fleet.yaml")
    state = FleetState.load(tmp_path / ".ngym-fleet" / "i20-fleet-ray")
    assert state is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        urls = {n: f"http://{r.host}:{r.port}" for n, r in state.servers.items()}
        # Ray placed them apart: one CPU per worker node, none on the head
        hosts = cluster.host_of_nodes()
        holder = {name: hosts[state.servers[name].replicas[0].node] for name in urls}
        assert sorted(holder.values()) == ["node1", "node2"]
        assert {r.host for r in state.servers.values()} == {f"{SUBNET}.11", f"{SUBNET}.12"}  # on their hosts

        assert rollout(urls["counter"], 4) == 1.0 and rollout(urls["weather"], 0) == 1.0
        outcomes: dict[str, list[str]] = {"weather": [], "counter": []}

        # Rollouts run back to back until 3 s after the kill, so the node dies with rollouts in flight however
        # fast this machine is (a fixed number of them could all finish before it).
        deadline = [float("inf")]

        def run(name: str) -> None:
            while time.monotonic() < deadline[0]:
                try:
                    reward = rollout(urls[name], 4 if name == "counter" else 0)
                    outcomes[name].append("right" if reward == 1.0 else f"WRONG {reward}")
                except (httpx.HTTPError, KeyError) as exc:
                    outcomes[name].append(f"failed: {type(exc).__name__}")

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(run, name) for _ in range(4) for name in ("weather", "counter")]
            time.sleep(1.0)
            cluster.kill(holder["counter"])  # mid-run
            started = time.monotonic()
            deadline[0] = started + 3.0
            for future in futures:
                future.result(timeout=120)  # never a hang
        assert time.monotonic() - started < 120
        assert outcomes["weather"] and set(outcomes["weather"]) == {"right"}  # the surviving node: every one right
        assert not [o for o in outcomes["counter"] if o.startswith("WRONG")]  # the lost node: loud, never wrong
        assert any(o.startswith("failed") for o in outcomes["counter"])
        print("ray fleet outcomes:", {n: {o: v.count(o) for o in set(v)} for n, v in outcomes.items()})
        with pytest.raises(httpx.HTTPError):
            rollout(urls["counter"], 4)

        status = ngym("status", "fleet.yaml", "--json", "--interval", "0")
        rows = {r["name"]: r for r in json.loads(status.stdout)}
        assert rows["weather"]["health"] == "ok" and rows["counter"]["health"] == "down"
        assert status.returncode == 1
    finally:
        down = ngym("down", "fleet.yaml")
    assert down.returncode == 0, down.stderr
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{urls['weather']}/health", timeout=5)
