"""NeMo Gym 0.7.0's own collector (``ng_collect_rollouts``, given only the fleet's head server) over a fleet on the
Ray engine while the Ray worker process holding one environment's actor is SIGKILLed mid-collection (the unit
dies with it at once; a raylet's death takes seconds to reach its workers, in which this small collection ends).

The fleet: ``counter`` (example_session_state_mgmt) and ``workplace`` (workplace_assistant), a node each; NeMo
Gym's own ``simple_agent`` per environment and ngym's replay model as the policy (local servers of the fleet).
The collector finishes (never a hang); every row of ``workplace`` comes back with its recorded reward; every row
of ``counter`` ends in ``out.jsonl`` with its recorded reward, masked, or in NeMo's failures file with no reward
(``+route_failures_to_sidecar=true``), never a wrong reward; ``ngym status`` names ``counter`` down; ``ngym
down`` stops everything. Needs the NeMo Gym 0.7.0 venv (``tools/nemo_venv.sh``) and ``make fleet-ray``'s Ray.
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
from typing import Any

import httpx
import pytest
import yaml

from ngym.fleet.state import FleetState

ray = pytest.importorskip("ray", reason="pip install 'ngym[ray]'")

from tests.cluster import test_fleet_e2e  # noqa: E402
from tests.cluster.ray_cluster import ENV, Cluster  # noqa: E402 (after the importorskip)
from tests.cluster.test_fleet_e2e import NemoRay  # noqa: E402
from tests.cluster.test_fleet_ray_dead_units import parent, unit_pid  # noqa: E402
from tests.netns import Hosts  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FLEET = "ray-collector"
DATA = {
    "counter": REPO / "resources_servers/example_session_state_mgmt/data",
    "workplace": REPO / "resources_servers/workplace_assistant/data",
}
REPEAT = 20  # each example row this many times: the collection outlasts the kill however fast the machine is
COLLECTOR_WAIT = 300  # seconds the collector may take after the kill to end every row (past it: a hang)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.fail("the Ray cluster test needs root and iproute2 (network namespaces)")
    with Hosts.for_this_run("rc", ["head", "node1", "node2"]) as hosts:
        made = Cluster(hosts, workers=2, cpus_per_worker=1)
        try:
            made.up()
            yield made
        finally:
            made.stop()


@pytest.fixture
def nemo_ray(nemo_python: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NemoRay]:
    """NeMo's own Ray (see ``test_fleet_e2e.NemoRay``), under a prefix of this run's own: what it cleans up at
    start is its own run's leftovers, never another run's Ray."""
    monkeypatch.setattr(test_fleet_e2e, "NEMO_RAY_PREFIX", f"rcnemo{os.getpid()}-")
    made = NemoRay(nemo_python)
    try:
        yield made
    finally:
        made.stop()


def fleet_file(tmp_path: Path, cluster: Cluster, nemo_python: Path, nemo_ray_address: str) -> Path:
    code = "import responses_api_agents, os; print(responses_api_agents.__path__[0])"
    agents = subprocess.run([str(nemo_python), "-c", code], check=True, capture_output=True, text=True, cwd="/")
    simple_agent = Path(agents.stdout.strip()) / "simple_agent"
    model = [
        sys.executable,
        "-m",
        "ngym.cli",
        "replay-model",
        "--data",
        str(DATA["counter"] / "example_rollouts.jsonl"),
    ]
    model += ["--env", "example_session_state_mgmt", "--env", "workplace_assistant"]
    servers: dict[str, Any] = {
        "policy_model": {
            "responses_api_models": {"replay": {}},
            "launch": {"command": [*model, "--host", "{host}", "--port", "{port}"]},
        }
    }
    for env in DATA:
        servers[f"{env}_agent"] = {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": env},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                }
            },
            "launch": {"python": str(nemo_python), "dir": str(simple_agent)},
        }
    fleet = {
        "name": FLEET,
        "engine": "ray",
        # NeMo's servers (its Python 3.13 venv) join a Ray of their own Python: Ray refuses a version mismatch
        "ray": {"address": cluster.address, "servers_address": nemo_ray_address},
        "head_server": {"port": 0},
        "environments": {"counter": "example_session_state_mgmt", "workplace": "workplace_assistant"},
        "servers": servers,
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def rows_and_rewards() -> tuple[list[dict[str, Any]], list[tuple[str, float]]]:
    """The collector's input (each example row ``REPEAT`` times) and, per distinct row (NeMo's
    ``_ng_task_index``), its environment and recorded reward."""
    rows, expected = [], []
    for env, folder in DATA.items():
        recorded = [json.loads(line) for line in (folder / "example_rollouts.jsonl").read_text().splitlines()]
        lines = (folder / "example.jsonl").read_text().splitlines()
        for line, record in zip(lines, recorded, strict=True):
            row = {**json.loads(line), "agent_ref": {"type": "responses_api_agents", "name": f"{env}_agent"}}
            rows += [row] * REPEAT
            expected.append((env, float(record["reward"])))
    return rows, expected


def verified(url: str) -> int:
    """Rollouts the environment verified so far (its /health through the front)."""
    try:
        return int(httpx.get(f"{url}/health", timeout=10).json()["traffic"]["verified"])
    except (httpx.HTTPError, KeyError, ValueError):
        return 0


def test_nemo_gyms_collector_finishes_when_an_environments_actor_dies(
    cluster: Cluster, nemo_ray: NemoRay, nemo_python: Path, tmp_path: Path
) -> None:
    path = fleet_file(tmp_path, cluster, nemo_python, nemo_ray.address)

    def ngym(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ngym.cli", *args]
        env = {**ENV, "RAY_ADDRESS": nemo_ray.address}
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)

    nemo_ray.wait()  # NeMo's environment servers start Ray: one for them all
    up = ngym("up", str(path), timeout=600)
    state = FleetState.load(tmp_path / ".ngym-fleet" / FLEET)
    assert state is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        counter = state.servers["counter"]
        assert counter.replicas[0].host != state.servers["workplace"].replicas[0].host
        rows, expected = rows_and_rewards()
        work = tmp_path / "collect"
        work.mkdir()
        (work / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        collector = subprocess.Popen(
            [
                str(nemo_python.parent / "ng_collect_rollouts"),
                f"+head_server.host={state.head.host}",
                f"+head_server.port={state.head.port}",
                f"+input_jsonl_fpath={work / 'in.jsonl'}",
                f"+output_jsonl_fpath={work / 'out.jsonl'}",
                "+route_failures_to_sidecar=true",  # NeMo's option for a run that loses rows
            ],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )
        url = f"http://{counter.host}:{counter.port}"
        deadline = time.monotonic() + 240
        while verified(url) < 1:  # the counter has verified a rollout of this collection: kill mid-run
            assert collector.poll() is None, collector.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the collector verified no counter rollout in 240 s"
            time.sleep(0.5)
        os.kill(parent(unit_pid(counter.replicas[0].host, counter.replicas[0].port)), signal.SIGKILL)
        try:
            output, _ = collector.communicate(timeout=COLLECTOR_WAIT)
        except subprocess.TimeoutExpired:
            collector.kill()
            pytest.fail(f"NeMo's collector still ran {COLLECTOR_WAIT} s after the actor died (a hang)")

        def lines(name: str) -> list[dict[str, Any]]:
            out = work / name
            return [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []

        def key(row: dict[str, Any]) -> tuple[int, int]:
            return row["_ng_task_index"], row.get("_ng_rollout_index", 0)

        ended: set[tuple[int, int]] = set()
        counts = {"right": 0, "masked": 0, "failed": 0}
        kept = 0
        for row in lines("out.jsonl"):
            env, want = expected[row["_ng_task_index"]]
            ended.add(key(row))
            if row.get("mask_sample"):
                assert env == "counter" and row.get("failure_kind"), row.get("failure_kind")
                counts["masked"] += 1
                continue
            assert row.get("reward") == want, (env, want, row.get("reward"))  # never a wrong reward
            counts["right"] += 1
            kept += env == "workplace"
        for row in lines("out_failures.jsonl"):
            env, _ = expected[row["_ng_task_index"]]
            assert env == "counter", (row.get("_ng_failure_class"), row.get("_ng_failure_message"))
            assert row.get("_ng_failure_class") and row.get("reward") is None, row
            if key(row) not in ended:
                counts["failed"] += 1
                ended.add(key(row))
        print(f"collector, actor killed mid-run (exit {collector.returncode}): {counts} of {len(rows)}")
        assert kept == REPEAT * sum(1 for env, _ in expected if env == "workplace"), output[-3000:]
        assert len(ended) == len(rows), (len(ended), len(rows), output[-3000:])  # every row ended
        assert counts["failed"] > 0, output[-3000:]  # the dead node's rows are in the failures file

        status = ngym("status", str(path), "--json", "--interval", "0")
        health = {r["name"]: r["health"] for r in json.loads(status.stdout)}
        assert health["counter"] == "down" and health["workplace"] == "ok", health
    finally:
        down = ngym("down", str(path))
    assert down.returncode == 0, down.stderr
    processes = [r.process for r in [state.head, *state.servers.values()] if r.process is not None]
    assert not [p.pid for p in processes if p.alive()]
