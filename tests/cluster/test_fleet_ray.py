"""A fleet placed on a real Ray cluster (``ray start --head`` + 2 worker nodes), one worker node killed mid-run.

Each node is a host of its own (:mod:`tests.netns`): a network namespace (``PREFIX-head``, ``PREFIX-node1``,
``PREFIX-node2``, the prefix and subnet this run's own) with a veth on one bridge, so the environments listen on
their node's address and every call crosses the "network"; ``ngym up`` runs on the machine (the bridge's
address). The cluster (:mod:`tests.cluster.ray_cluster`): a head with no
CPUs and two worker nodes with one CPU each, so Ray must put each of the two environments on its own worker node.
Rollouts run on both; the node holding the counter environment is killed (its whole process group, SIGKILL) while
rollouts are in flight. Every rollout on the surviving node scores right; every rollout on the dead node ends as a loud
failure (5xx from the front's HAProxy, which serves every environment's URL on the head node), never a wrong
reward and never a hang; ``ngym status`` shows it down; ``ngym down``
leaves nothing. ``make fleet-ray`` runs this (needs ``pip install 'ngym[ray]'``; about a minute).
"""

from __future__ import annotations

import json
import os
import shutil
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

ray = pytest.importorskip("ray", reason="pip install 'ngym[ray]'")

from tests.cluster.ray_cluster import ENV, Cluster  # noqa: E402 (after the importorskip)
from tests.netns import Hosts  # noqa: E402


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.fail("the Ray cluster test needs root and iproute2 (network namespaces)")
    with Hosts.for_this_run("rf", ["head", "node1", "node2"]) as hosts:  # namespaces of this run's own
        made = Cluster(hosts, workers=2, cpus_per_worker=1)
        try:
            made.up()
            yield made
        finally:
            made.stop()


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
        return subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)

    up = ngym("up", "fleet.yaml")
    state = FleetState.load(tmp_path / ".ngym-fleet" / "i20-fleet-ray")
    assert state is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        urls = {n: f"http://{r.host}:{r.port}" for n, r in state.servers.items()}
        # Ray placed them apart: one CPU per worker node, none on the head
        placed = {name: state.servers[name].replicas[0].node for name in urls}
        holder = cluster.holders(placed)
        assert sorted(holder.values()) == ["node1", "node2"]
        nodes = {cluster.hosts.address("node1"), cluster.hosts.address("node2")}
        assert {r.replicas[0].host for r in state.servers.values()} == nodes
        # each one URL is the front's HAProxy on the head node, even for one replica: a lost node's environment
        # then answers 503 at once instead of a refused connection (which NeMo Gym's client retries forever)
        assert {r.host for r in state.servers.values()} == {cluster.hosts.address("head")}

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
        with pytest.raises(httpx.HTTPStatusError) as lost:  # an HTTP answer, fast: not a refused connection
            rollout(urls["counter"], 4)
        assert lost.value.response.status_code == 503

        status = ngym("status", "fleet.yaml", "--json", "--interval", "0")
        rows = {r["name"]: r for r in json.loads(status.stdout)}
        assert rows["weather"]["health"] == "ok" and rows["counter"]["health"] == "down"
        assert status.returncode == 1
    finally:
        down = ngym("down", "fleet.yaml")
    assert down.returncode == 0, down.stderr
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{urls['weather']}/health", timeout=5)
