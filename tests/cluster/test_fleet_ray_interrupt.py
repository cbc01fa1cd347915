"""Ctrl-C or SIGTERM while ``ngym up`` on the ray engine waits for Ray to place a replica (its CPUs are not on the
cluster) stops what that ``up`` started: no actor of the fleet (replicas, the front with its head server) and no
placement group is left on the cluster, and ``ngym down`` after it has nothing to stop.

A real Ray cluster (a head and one worker node of 1 CPU, each in its own network namespace); the environment asks
``workers: 2`` (2 CPUs per replica), which no node has, so the placement waits until the signal.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ngym.fleet.state import FleetState

ray = pytest.importorskip("ray", reason="pip install 'ngym[ray]'")

from tests.cluster.ray_cluster import ENV, Cluster  # noqa: E402 (after the importorskip)
from tests.netns import Hosts  # noqa: E402

FLEET = "ray-interrupt"

#: What is left of the fleet on the cluster: its named actors still alive and its placement groups not removed.
LEFT = """
import json, ray
ray.init(address=%r, log_to_driver=False)
actors = [a for a in ray.util.list_named_actors(all_namespaces=True) if %r in a["name"]]
alive = []
for a in actors:
    try:
        ray.get_actor(a["name"], namespace=a["namespace"])
        alive.append(a["name"])
    except ValueError:
        pass
groups = [g["name"] for g in ray.util.placement_group_table().values() if %r in g["name"] and g["state"] != "REMOVED"]
print(json.dumps({"actors": alive, "groups": groups}))
"""


@pytest.fixture(scope="module")  # one cluster for both signals: each run leaves nothing on it (checked)
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.fail("the Ray cluster test needs root and iproute2 (network namespaces)")
    with Hosts.for_this_run("ri", ["head", "node1"]) as hosts:
        made = Cluster(hosts, workers=1, cpus_per_worker=1)
        try:
            made.up()
            yield made
        finally:
            made.stop()


def left_on(cluster: Cluster) -> dict[str, list[str]]:
    code = LEFT % (cluster.address, FLEET, FLEET)
    out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    # the last line that is JSON: Ray may print a warning after it ("raylet has lagging heartbeats", under load)
    result: dict[str, list[str]] = json.loads(next(ln for ln in reversed(out.stdout.splitlines()) if ln[:1] == "{"))
    return result


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_ray_waits_to_place_leaves_nothing_on_the_cluster(
    cluster: Cluster, tmp_path: Path, signum: int
) -> None:
    fleet = {
        "name": FLEET,
        "engine": "ray",
        "ray": {"address": cluster.address},
        "head_server": {"port": 0},
        "environments": {"counter": {"env": "example_session_state_mgmt", "workers": 2}},
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    up = subprocess.Popen(
        [sys.executable, "-m", "ngym.cli", "up", "fleet.yaml", "--startup-seconds", "300"],
        cwd=tmp_path,
        env={**ENV, "NGYM_PROGRESS_SECONDS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 - as a terminal starts it
    )
    try:
        assert up.stderr is not None
        seen = []
        deadline = time.monotonic() + 180
        for line in up.stderr:  # until the Ticker says it waits for the placement
            seen.append(line)
            if "placing 1 replica(s)" in line or time.monotonic() > deadline:
                break
        assert any("placing" in line for line in seen), "".join(seen)
        state = FleetState.load(tmp_path / ".ngym-fleet" / FLEET)
        assert state is not None and state.servers["counter"].replicas[0].port == 0  # not placed: it waits
        before = left_on(cluster)
        assert before["groups"] and before["actors"], before  # the group waits; the front and the replica exist
        up.send_signal(signum)
        _, rest = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert up.returncode == 130, "".join(seen) + rest
    assert "interrupted" in rest and "Traceback" not in rest, rest
    assert left_on(cluster) == {"actors": [], "groups": []}
    down = subprocess.run(
        [sys.executable, "-m", "ngym.cli", "down", "fleet.yaml"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert down.returncode == 0 and "not up" in down.stdout, down.stdout + down.stderr
