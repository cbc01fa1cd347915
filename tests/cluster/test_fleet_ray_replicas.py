"""The ray engine in depth, on a real Ray cluster (a head and 2 worker nodes, each in its own network namespace):

* a stateful environment at ``replicas: 2`` gets one actor on each worker node (Ray's placement group, SPREAD),
  behind ONE URL: HAProxy, configured by ngym's affinity rules, on the head node; every request of a rollout
  reaches the replica that seeded it. A replica's node killed: the rollouts it held end masked
  (``session_lost``) or as an HTTP error, never a wrong reward; those on the other replica all score right,
  and new rollouts go to the survivor;
* a ``nemo-gym:`` entry (NeMo Gym 0.7.0's ``code_gen``) runs on the cluster in its own virtualenv, and its
  CPU-heavy checks (``check_correctness_remote.remote``, Ray tasks) run on the cluster's CPUs: Ray's own task
  events show them on the other worker node (the environment's node has no CPU left), rewards as NeMo recorded;
* the head server runs on the cluster's head node (the fleet's front actor), not where ``ngym up`` ran: a run
  killed outright leaves nothing behind once the cluster's namespaces are gone; ``ngym down`` leaves no actor.

``make fleet-ray`` runs this (needs ``pip install 'ngym[ray]'`` and HAProxy; about two minutes, the first run a
minute more to make code_gen's virtualenv in the fleet venv cache).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ngym.fleet.state import FleetState
from tests.cluster.ray_cluster import ENV, Cluster
from tests.netns import Hosts

ray = pytest.importorskip("ray", reason="pip install 'ngym[ray]'")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from nemo_envs import verify_payloads  # noqa: E402 (moved here from nemo_replay_inprocess by i23-small)

from ngym.config import cache_root  # noqa: E402

FLEET = "i20r-fleet"
RESPONSE = {
    "id": "r", "created_at": 0, "model": "m", "object": "response", "output": [],
    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
}  # fmt: skip


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.fail("the Ray cluster test needs root and iproute2 (network namespaces)")
    with Hosts.for_this_run("rr", ["head", "node1", "node2"]) as hosts:  # namespaces of this run's own
        # 2 CPUs per worker node: a counter replica on each, code_gen's unit on one: one CPU left, on one node
        made = Cluster(hosts, workers=2, cpus_per_worker=2)
        try:
            made.up()
            yield made
        finally:
            made.stop()


def code_gen_cases() -> list[tuple[dict[str, Any], float]]:
    """NeMo Gym 0.7.0's recorded code_gen rollouts as verify bodies, each with the reward NeMo gave it."""
    wheel = next((cache_root() / "nemo-wheel").glob("nemo_gym-0.7.0-*.whl"))
    with zipfile.ZipFile(wheel) as archive:

        def rows(name: str) -> list[dict[str, Any]]:
            text = archive.read(f"resources_servers/code_gen/data/{name}").decode()
            return [json.loads(line) for line in text.splitlines() if line.strip()]

        inputs, rollouts = rows("example.jsonl"), rows("example_rollouts.jsonl")
    return [(body, float(r["reward"])) for body, r in zip(verify_payloads(inputs, rollouts), rollouts, strict=True)]


class Rollout:
    """One counter rollout through the environment's one URL, step by step."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=20)
        seeded = self.http.post("/seed_session", json={"initial_count": 1})
        seeded.raise_for_status()
        self.cookie = {"cookie": seeded.headers["set-cookie"].split(";")[0]}
        self.replica = seeded.headers["x-ngym-worker"]  # HAProxy's backend: r0 or r1
        self.count = 1

    def increment(self) -> None:
        answer = self.http.post("/increment_counter", json={"count": 1}, headers=self.cookie)
        answer.raise_for_status()
        assert answer.headers["x-ngym-worker"] == self.replica  # affinity: the replica that seeded it
        self.count += 1

    def verify(self) -> dict[str, Any]:
        body = {"responses_create_params": {"input": "x"}, "response": RESPONSE, "expected_count": self.count}
        answer = self.http.post("/verify", json=body, headers=self.cookie)
        answer.raise_for_status()
        return dict(answer.json())

    def finish(self, increment: bool = True) -> str:
        """ "right", "masked <kind>", "failed <error>" or "WRONG <reward>" (a tool call first, or verify at once)."""
        try:
            if increment:
                self.increment()
            result = self.verify()
        except (httpx.HTTPError, KeyError) as exc:
            return f"failed {type(exc).__name__}"
        finally:
            self.http.close()
        if result.get("mask_sample"):
            return f"masked {result.get('failure_kind')}"
        return "right" if result["reward"] == 1.0 else f"WRONG {result['reward']}"


def test_ray_replicas_behind_one_affine_url_and_a_nemo_environment_with_ray_tasks(
    cluster: Cluster, tmp_path: Path
) -> None:
    fleet = {
        "name": FLEET,
        "engine": "ray",
        "ray": {"address": cluster.address},
        "head_server": {"port": 0},
        "environments": {
            "counter": {"env": "example_session_state_mgmt", "replicas": 2},
            "code_gen": "nemo-gym:code_gen",
        },
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))

    def ngym(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ngym.cli", *args]
        return subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)

    up = ngym("up", "fleet.yaml")
    state = FleetState.load(tmp_path / ".ngym-fleet" / FLEET)
    assert state is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        # the head server runs on the cluster's head node (its namespace), not here
        assert state.head.host == cluster.hosts.address("head")
        served = yaml.safe_load(httpx.get(f"http://{state.head.host}:{state.head.port}/global_config_dict_yaml").json())
        counter = served["counter"]["resources_servers"]["example_session_state_mgmt"]
        assert served["ray_head_node_address"] == cluster.address  # NeMo's ray_enabled servers join this cluster
        assert (counter["host"], counter["port"]) == (state.head.host, state.servers["counter"].port)
        replicas = state.servers["counter"].replicas
        holder = cluster.holders({f"r{i}": r.node for i, r in enumerate(replicas)})
        assert sorted(holder.values()) == ["node1", "node2"]  # spread: one on each
        (code_gen,) = state.servers["code_gen"].replicas

        # affinity: rollouts seeded on both replicas, every request on its own replica, every reward right
        url = f"http://{counter['host']}:{counter['port']}"
        rollouts = [Rollout(url) for _ in range(8)]
        assert {r.replica for r in rollouts} == {"r0", "r1"}
        for rollout in rollouts:
            rollout.increment()
        assert {r.finish() for r in rollouts} == {"right"}

        # code_gen: its own venv, its Ray tasks on the other worker node, rewards as NeMo Gym recorded them
        cases = code_gen_cases()
        cg = f"http://{code_gen.host}:{code_gen.port}"
        rewards = [httpx.post(f"{cg}/verify", json=body, timeout=120).json()["reward"] for body, _ in cases]
        assert rewards == [expected for _, expected in cases] and 1.0 in rewards
        ray_nodes = task_nodes(cluster.address, "check_correctness")
        assert ray_nodes and code_gen.host not in ray_nodes, ray_nodes  # never its own node (no CPU left there)
        assert ray_nodes <= {cluster.hosts.address("node1"), cluster.hosts.address("node2")}

        # a replica's node killed with rollouts seeded on both replicas
        seeded = [Rollout(url) for _ in range(8)]
        assert {r.replica for r in seeded} == {"r0", "r1"}
        lost_replica = "r1"
        cluster.kill(holder[lost_replica])
        time.sleep(3)  # HAProxy's checks (every second, down after 2 failures)
        outcomes = {r.replica: [] for r in seeded}  # type: dict[str, list[str]]
        for rollout in seeded:  # on each replica, half go on with a tool call, half verify at once
            outcomes[rollout.replica].append(rollout.finish(increment=len(outcomes[rollout.replica]) % 2 == 0))
        print("after the kill:", outcomes)
        assert set(outcomes["r0"]) == {"right"}  # the surviving replica: every one right
        lost = outcomes[lost_replica]
        assert not [o for o in lost if o.startswith("WRONG")]  # the lost one: loud, never a wrong reward
        assert all(o == "masked session_lost" or o.startswith("failed") for o in lost), lost
        assert "masked session_lost" in lost  # a verify for a lost session reaches the survivor: masked
        after = [Rollout(url) for _ in range(4)]
        for rollout in after:
            rollout.increment()
        assert {r.replica for r in after} == {"r0"} and {r.finish() for r in after} == {"right"}

        status = ngym("status", "fleet.yaml", "--json", "--interval", "0")
        rows = {r["name"]: r for r in json.loads(status.stdout)}
        assert rows["counter"]["health"] == "ok"  # its one URL still serves
        assert rows["counter"]["reason"].startswith("1/2 replicas answer")  # the lost replica is shown
        parts = {p["name"]: p for p in rows["counter"]["parts"]}  # a row per replica: sessions and their bytes
        assert parts[lost_replica]["health"] != "ok" and parts["r0"]["health"] == "ok", parts
        assert parts["r0"]["session_bytes"] is not None and rows["counter"]["session_bytes"] is not None
    finally:
        down = ngym("down", "fleet.yaml")
    assert down.returncode == 0, down.stderr
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://{state.head.host}:{state.head.port}/health", timeout=5)
    assert named_actors(cluster.address) == []


def task_nodes(address: str, task: str) -> set[str]:
    """The node addresses Ray's own task events show ``task`` ran on (``ray.timeline``: GCS, no dashboard)."""
    code = (
        "import json, ray; ray.init(address=%r, log_to_driver=False); "
        "print(json.dumps([[e.get('name', ''), e.get('pid', '')] for e in ray.timeline()]))"
    )
    deadline = time.monotonic() + 30
    while True:  # task events reach the GCS every second or so
        out = subprocess.run([sys.executable, "-c", code % address], env=ENV, capture_output=True, text=True)
        events = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else []
        nodes = {str(pid).removeprefix("Node:") for name, pid in events if task in name}
        if nodes or time.monotonic() > deadline:
            return nodes
        time.sleep(1)


def named_actors(address: str) -> list[str]:
    code = (
        "import json, ray; ray.init(address=%r, log_to_driver=False); "
        "print(json.dumps(ray.util.list_named_actors(all_namespaces=True)))"
    )
    out = subprocess.run([sys.executable, "-c", code % address], env=ENV, capture_output=True, text=True)
    # the last line that is JSON: Ray may print a warning after it ("raylet has lagging heartbeats", under load)
    return list(json.loads(next(line for line in reversed(out.stdout.splitlines()) if line.startswith("["))))
