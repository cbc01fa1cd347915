"""A fleet placed on a real Ray cluster (``ray start --head`` + 2 worker nodes), one worker node killed mid-run.

Each node is a host of its own: a network namespace (``i20f-h0`` head, ``i20f-h1``, ``i20f-h2``) with a veth on
one bridge (10.220.0.0/24), so the environments listen on their node's address and every call crosses the
"network"; ``ngym up`` runs on the machine (10.220.0.1). The cluster: a head with no CPUs and two worker nodes
with one CPU each, so Ray must put each of the two
environments on its own worker node. Rollouts run on both; the node holding the counter environment is killed
(its whole process group, SIGKILL) while rollouts are in flight. Every rollout on the surviving node scores
right; every rollout on the dead node ends as a loud failure (connection error or 5xx), never a wrong reward and
never a hang; ``ngym status`` shows it down; ``ngym down`` leaves nothing. ``make fleet-ray`` runs this (needs
``pip install 'ngym[ray]'``; about a minute).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
RAY = str(Path(sys.executable).with_name("ray"))
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


BRIDGE, SUBNET = "i20f-br", "10.220.0"
HOSTS = {"head": 0, "node1": 1, "node2": 2}


def sh(*command: str) -> None:
    subprocess.run(command, check=False, capture_output=True)


def make_hosts() -> None:
    """One bridge, and per host a namespace with a veth on it (idempotent; ``drop_hosts`` removes them)."""
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    # Docker's FORWARD policy would drop bridged traffic between the namespaces (br_netfilter): allow this bridge
    sh("iptables", "-I", "FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")
    for i in HOSTS.values():
        ns, outer, inner = f"i20f-h{i}", f"i20f-v{i}", f"i20f-p{i}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        sh("ip", "link", "set", inner, "netns", ns)
        sh("ip", "link", "set", outer, "master", BRIDGE)
        sh("ip", "link", "set", outer, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{SUBNET}.1{i}/24", "dev", inner)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        sh("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", f"{SUBNET}.1")


def drop_hosts() -> None:
    """Remove what ``make_hosts`` made, processes left in the namespaces included (best effort: also run before
    ``make_hosts``, so a run killed outright, whose ``finally`` never ran, leaves nothing to the next)."""
    for i in HOSTS.values():
        pids = subprocess.run(["ip", "netns", "pids", f"i20f-h{i}"], capture_output=True, text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        sh("ip", "netns", "del", f"i20f-h{i}")
        sh("ip", "link", "del", f"i20f-v{i}")
    sh("iptables", "-D", "FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")
    sh("ip", "link", "del", BRIDGE)


class Cluster:
    """A head and two worker nodes, each ``ray start --block`` in its own namespace and process group."""

    def __init__(self) -> None:
        self.temp = tempfile.mkdtemp(prefix="i20fleet-ray-", dir="/tmp")  # short: Ray's unix socket paths
        self.port = free_port()
        self.address = f"{SUBNET}.10:{self.port}"
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> None:
        log = open(Path(self.temp) / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        ip = f"{SUBNET}.1{HOSTS[name]}"
        common = [f"--node-ip-address={ip}", f"--temp-dir={self.temp}", "--block", "--disable-usage-stats"]
        self.nodes[name] = subprocess.Popen(
            ["ip", "netns", "exec", f"i20f-h{HOSTS[name]}", RAY, "start", *args, *common],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=ENV,
            start_new_session=True,
        )

    def up(self) -> None:
        self.start("head", "--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false")
        self.wait(1)
        for i in (1, 2):  # one at a time: two raylets starting at once on one address race for their ports
            self.start(f"node{i}", f"--address={self.address}", "--num-cpus=1", f'--resources={{"i20node{i}": 1}}')
            self.wait(1 + i)

    def alive_nodes(self) -> list[dict[str, Any]]:
        code = "import ray, json; ray.init(address='%s', log_to_driver=False); print(json.dumps(ray.nodes()))"
        out = subprocess.run([sys.executable, "-c", code % self.address], env=ENV, capture_output=True, text=True)
        try:
            return [n for n in json.loads(out.stdout.strip().splitlines()[-1]) if n["Alive"]]
        except (ValueError, IndexError):
            return []

    def wait(self, count: int) -> None:
        deadline = time.monotonic() + 120
        while len(self.alive_nodes()) < count:
            assert time.monotonic() < deadline, f"the Ray cluster did not reach {count} node(s): see {self.temp}"
            time.sleep(1)

    def kill(self, name: str) -> None:
        os.killpg(self.nodes[name].pid, signal.SIGKILL)
        self.nodes[name].wait()

    def stop(self) -> None:
        for process in self.nodes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.fail("the Ray cluster test needs root and iproute2 (network namespaces)")
    drop_hosts()  # what a killed earlier run left
    make_hosts()
    made = Cluster()
    try:
        made.up()
        yield made
    finally:
        made.stop()
        drop_hosts()


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
        nodes = {n["NodeID"]: n for n in cluster.alive_nodes()}
        placed = {name: state.servers[name].reason.removeprefix("ray node ") for name in urls}
        which = {
            nid: next(f"node{i}" for i in (1, 2) if f"i20node{i}" in n["Resources"])
            for nid, n in nodes.items()
            if "CPU" in n["Resources"]
        }
        holder = {name: next(w for nid, w in which.items() if nid.startswith(p)) for name, p in placed.items()}
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
