"""Parts of a unit on the Ray engine killed one way at a time, rollouts in flight: the replica's actor process
(its Ray worker), the raylet of the node that holds it, or the unit's whole process tree (``ngym run --workers 2``,
its workers and HAProxy) under a live actor.

Each way: rollouts on the other environment (its own node) all score right; the hit environment's rollouts end
as loud failures, never a wrong reward and never a hang; a new rollout is an HTTP 503 at once (the front's
HAProxy), not a refused connection; ``ngym status`` names the hit environment down and the other ok; ``ngym down``
leaves no process of the unit (its workers and HAProxy included) and no actor. A real Ray cluster: a head and two
worker nodes of 2 CPUs, each in a network namespace of this run (``make fleet-ray``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

from ngym.fleet.state import FleetState

ray = pytest.importorskip("ray", reason="pip install 'ngym[ray]'")

from tests.cluster.ray_cluster import ENV, Cluster  # noqa: E402 (after the importorskip)
from tests.cluster.test_fleet_ray import rollout  # noqa: E402
from tests.netns import Hosts  # noqa: E402

FLEET = "ray-dead-units"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.fail("the Ray cluster test needs root and iproute2 (network namespaces)")
    with Hosts.for_this_run("rd", ["head", "node1", "node2"]) as hosts:
        made = Cluster(hosts, workers=2, cpus_per_worker=2)
        try:
            made.up()
            yield made
        finally:
            made.stop()


def children() -> dict[int, list[int]]:
    """Every process's children (from /proc)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> set[int]:
    tree, found, todo = children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie, dead and not yet reaped by its parent, is not)."""

    def state(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "gone"

    return {pid for pid in pids if state(pid) not in ("gone", "Z", "X")}


def unit_pid(host: str, port: int) -> int:
    """The ``ngym run`` process of the unit listening at ``host:port`` (started by its actor)."""
    wanted = f"--host {host} --port {port}"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and "ngym.cli run" in (text := cmdline(int(entry.name))) and wanted in text:
            return int(entry.name)
    raise AssertionError(f"no unit process listens at {host}:{port}")


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def raylet_of(address: str) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            text = cmdline(int(entry.name))
            if "/raylet" in text.split(" ", 1)[0] and f"--node_ip_address={address}" in text:
                return int(entry.name)
    raise AssertionError(f"no raylet of {address}")


@pytest.mark.parametrize("way", ["actor", "raylet", "unit-tree"])
def test_a_dead_part_of_a_unit_ends_its_rollouts_loudly_and_down_leaves_nothing(
    way: str, cluster: Cluster, tmp_path: Path
) -> None:
    fleet = {
        "name": FLEET,
        "engine": "ray",
        "ray": {"address": cluster.address},
        "head_server": {"port": 0},
        "environments": {
            "weather": {"env": "example_single_tool_call", "workers": 2},
            "counter": {"env": "example_session_state_mgmt", "workers": 2},
        },
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))

    def ngym(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ngym.cli", *args]
        return subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)

    up = ngym("up", "fleet.yaml")
    state = FleetState.load(tmp_path / ".ngym-fleet" / FLEET)
    assert state is not None
    units: dict[str, set[int]] = {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        urls = {n: f"http://{r.host}:{r.port}" for n, r in state.servers.items()}
        replica = {name: state.servers[name].replicas[0] for name in urls}
        assert replica["weather"].host != replica["counter"].host  # a node each (2 CPUs per node, 2 per unit)
        for name, r in replica.items():
            pid = unit_pid(r.host, r.port)
            units[name] = {pid, *descendants(pid)}
            assert len(units[name]) >= 4, (name, [cmdline(p) for p in units[name]])  # run, 2 workers, HAProxy
        assert rollout(urls["counter"], 4) == 1.0 and rollout(urls["weather"], 0) == 1.0

        outcomes: dict[str, list[str]] = {"weather": [], "counter": []}
        deadline = [float("inf")]

        def run(name: str) -> None:
            while time.monotonic() < deadline[0]:
                try:
                    reward = rollout(urls[name], 4 if name == "counter" else 0)
                    outcomes[name].append("right" if reward == 1.0 else f"WRONG {reward}")
                except (httpx.HTTPError, KeyError) as exc:
                    outcomes[name].append(f"failed: {type(exc).__name__}")

        counter = unit_pid(replica["counter"].host, replica["counter"].port)
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(run, name) for _ in range(3) for name in ("weather", "counter")]
            time.sleep(1.0)
            if way == "actor":  # the Ray worker process holding the replica's actor
                os.kill(parent(counter), signal.SIGKILL)
            elif way == "raylet":
                os.kill(raylet_of(replica["counter"].host), signal.SIGKILL)
            else:  # the unit's whole process tree; its actor lives on
                for pid in alive(units["counter"]):
                    os.kill(pid, signal.SIGKILL)
            started = time.monotonic()
            deadline[0] = started + 3.0
            for future in futures:
                future.result(timeout=120)  # never a hang
        print(f"{way}:", {n: {o: v.count(o) for o in set(v)} for n, v in outcomes.items()})
        assert outcomes["weather"] and set(outcomes["weather"]) == {"right"}
        assert not [o for o in outcomes["counter"] if o.startswith("WRONG")]
        # a raylet's death reaches its workers (and the unit with them) within seconds: until the front's HAProxy
        # marks the unit down a rollout may still score (right); from then on it is an HTTP 503, never a refused
        # connection; and nothing of the unit is left half alive
        deadline = time.monotonic() + 120
        while True:
            try:
                assert rollout(urls["counter"], 4) == 1.0
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 503:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the front never answered 503 for the dead unit"
            time.sleep(0.5)
        while alive(units["counter"]):
            assert time.monotonic() < deadline, [cmdline(p) for p in alive(units["counter"])]
            time.sleep(0.5)

        status = ngym("status", "fleet.yaml", "--json", "--interval", "0")
        rows = {r["name"]: r for r in json.loads(status.stdout)}
        assert rows["weather"]["health"] == "ok" and rows["counter"]["health"] == "down", status.stdout
        assert status.returncode == 1
    finally:
        down = ngym("down", "fleet.yaml")
    assert down.returncode == 0, down.stderr
    left = {name: [cmdline(p) for p in alive(pids)] for name, pids in units.items() if alive(pids)}
    assert left == {}, left
    # nor the HAProxy folders of the units (the killed one's supervisor never removed its own)
    folders = [
        f for pids in units.values() for pid in pids for f in Path(tempfile.gettempdir()).glob(f"ngym-haproxy-{pid}-*")
    ]
    assert folders == [], folders
