"""Issue 20's end-to-end check: ONE fleet of five environments on a Ray cluster over network-namespace hosts,
driven by NeMo Gym 0.7.0's own collector and by ``ngym profile`` (real Locust), one host killed mid-run.

The machine: four hosts (:mod:`tests.netns`, bridge 10.221.0.0/24): ``head`` (the Ray head, no CPUs), ``node1``
and ``node2`` (Ray worker nodes, 3 CPUs each) and ``redis`` (a ``redis-server``). ``ngym up`` runs on the
machine itself and places the environments with the ray engine, one actor (1 CPU) each, spread by Ray:

- ``nemo_counter``: NeMo Gym's ``example_session_state_mgmt`` (``nemo-gym:``, own virtualenv): its state is a
  dict on the server object (``self.session_id_to_counter[session_id]``);
- ``nemo_turns``: NeMo Gym's ``example_multi_turn_gymnasium`` (own virtualenv): ``self.session_turns[...]``;
- ``workplace``: workplace_assistant; ``math``: math_with_code (a live sandbox process per session);
- ``counter_redis``: ngym's counter, whose state is serializable, on the Redis store of the ``redis`` host.

NeMo Gym's collector (``ng_collect_rollouts`` from its own venv, given only the head server: every server is
found by name in the global config the fleet serves) runs the example rows of the four tool-calling
environments through its Simple Agent and ``ngym replay-model``: every reward is the recorded one. Then one
``ngym profile --fleet`` per environment (NGYM_E2E_USERS concurrent users in all, default 100; ``make
fleet-e2e-1000`` runs 1,000) and the collector again, while the worker node holding ``nemo_counter`` is killed
(every process of its host, SIGKILL). Every rollout on the surviving node scores the recorded reward with no
failure; every rollout of the dead node's environments ends as a loud failure or a masked ``session_lost``
verify, never a reward that differs from the recording; NeMo's collector finishes, every row of the dead node's
environments in its failures file (or masked): each environment's URL is the front's HAProxy on the head node,
which answers 503 for an environment with no replica left; nothing waits past its bound. ``ngym status`` shows the
dead node's environments down, ``ngym down`` leaves no process. The counts are printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ngym.fleet.isolation import ensure_venv
from ngym.fleet.spec import FleetSpec, load_fleet
from ngym.fleet.state import FleetState

ray = pytest.importorskip("ray", reason="pip install 'ngym[ray]'")

from tests.cluster.ray_cluster import ENV, Cluster, free_port  # noqa: E402 (after the importorskip)
from tests.netns import RUN_MARK, Hosts, kill_marked  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PREFIX = "i20e"  # its namespaces, and the mark of what it starts outside them
SUBNET = "10.221.0"
REDIS_PORT = 6379  # inside the redis host's own namespace: no other process of the machine can hold it
#: concurrent Locust users over the five environments, and how long each profile runs
USERS = int(os.environ.get("NGYM_E2E_USERS", "100"))
SECONDS = int(os.environ.get("NGYM_E2E_SECONDS", "20"))
#: each environment's share of the users: math_with_code holds a sandbox process per live session
#: seconds NeMo's collector may take, after the profiles ended, to finish every row (past it: a hang)
COLLECTOR_WAIT = 240
SHARE = {"nemo_counter": 0.25, "counter_redis": 0.25, "nemo_turns": 0.25, "workplace": 0.15, "math": 0.10}
#: tool-calling environments: name in the fleet -> where its example rows come from (None: NeMo's venv)
COLLECTED = {
    "nemo_counter": None,
    "counter_redis": REPO / "resources_servers/example_session_state_mgmt/data",
    "workplace": REPO / "resources_servers/workplace_assistant/data",
    "math": REPO / "resources_servers/math_with_code/data",
}


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("redis-server"):
        pytest.fail("the end-to-end fleet test needs root, iproute2 (network namespaces) and redis-server")
    kill_marked(f"{RUN_MARK}={PREFIX}")  # what a run killed outright left outside the namespaces
    with Hosts(PREFIX, SUBNET, ["head", "node1", "node2", "redis"]) as hosts:
        made = Cluster(hosts, workers=2, cpus_per_worker=3)
        redis = subprocess.Popen(
            [*hosts.exec_argv("redis"), "redis-server", "--bind", hosts.address("redis"), "--port", str(REDIS_PORT)]
            + ["--save", "", "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            made.up()
            yield made
        finally:
            made.stop()
            redis.kill()
            redis.wait()


def nemo_data(nemo_python: Path, env: str) -> Path:
    """The data folder of one of NeMo Gym's environments, in its own venv (the wheel ships it)."""
    code = "import resources_servers, os; print(resources_servers.__path__[0])"
    # cwd /: the checkout's own resources_servers/ must not be found first
    out = subprocess.run([str(nemo_python), "-c", code], check=True, capture_output=True, text=True, cwd="/").stdout
    return Path(out.strip()) / env / "data"


def fleet_file(tmp_path: Path, cluster: Cluster, nemo_python: Path, nemo_ray: str) -> Path:
    site = nemo_data(nemo_python, "x").parents[2]  # site-packages of NeMo's venv
    counter_rollouts = nemo_data(nemo_python, "example_session_state_mgmt") / "example_rollouts.jsonl"
    model = [sys.executable, "-m", "ngym.cli", "replay-model", "--data", str(counter_rollouts)]
    for env in ("example_session_state_mgmt", "workplace_assistant", "math_with_code"):
        model += ["--env", env]
    servers: dict[str, Any] = {
        "policy_model": {
            "responses_api_models": {"replay": {}},
            "launch": {"command": [*model, "--host", "{host}", "--port", "{port}"]},
        }
    }
    for env in COLLECTED:  # NeMo Gym's own agent and environment server per environment, from its venv
        servers[f"{env}_agent"] = {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": env},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                }
            },
            "launch": {"python": str(nemo_python), "dir": str(site / "responses_api_agents" / "simple_agent")},
        }
        servers[f"{env}_env"] = {
            "environment_servers": {
                "legacy_agent": {
                    "entrypoint": "app.py",
                    "agent_server": {"type": "responses_api_agents", "name": f"{env}_agent"},
                    "max_concurrent_episodes": None,
                    "queue_timeout_seconds": None,
                    "default_episode_timeout_seconds": 120,
                    "cleanup_timeout_seconds": 30,
                }
            },
            "launch": {"python": str(nemo_python), "dir": str(site / "environment_servers" / "legacy_agent")},
        }
    redis_url = f"redis://{cluster.hosts.address('redis')}:{REDIS_PORT}/0"
    fleet = {
        "name": "i20e-fleet",
        "engine": "ray",
        # NeMo's servers (its Python 3.13 venv) join a Ray of their own Python: Ray refuses a version mismatch
        "ray": {"address": cluster.address, "servers_address": nemo_ray},
        "head_server": {"port": 0},
        "environments": {
            "nemo_counter": "nemo-gym:example_session_state_mgmt",
            "nemo_turns": "nemo-gym:example_multi_turn_gymnasium",
            "workplace": "workplace_assistant",
            "math": {"env": "math_with_code", "config": {"max_sessions": 2000}},
            "counter_redis": {"env": "example_session_state_mgmt", "config": {"session_store": redis_url}},
        },
        "servers": servers,
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def ngym(*args: str, cwd: Path, timeout: float = 300, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def collector_rows(nemo_python: Path, repeat: int = 1) -> tuple[list[dict[str, Any]], list[tuple[str, float]]]:
    """The example rows of the tool-calling environments for NeMo's collector, and per row (environment, the
    recorded reward)."""
    rows, expected = [], []
    for env, data in COLLECTED.items():
        folder = data or nemo_data(nemo_python, "example_session_state_mgmt")
        recorded = [json.loads(line) for line in (folder / "example_rollouts.jsonl").read_text().splitlines()]
        lines = (folder / "example.jsonl").read_text().splitlines()
        for _ in range(repeat):
            for line, record in zip(lines, recorded, strict=True):
                rows.append({**json.loads(line), "agent_ref": {"type": "responses_api_agents", "name": f"{env}_agent"}})
                expected.append((env, float(record["reward"])))
    return rows, expected


def collect(
    nemo_python: Path, state: FleetState, rows: list[dict[str, Any]], work: Path, *options: str
) -> subprocess.Popen[str]:
    """NeMo Gym 0.7.0's ``ng_collect_rollouts``, given only the fleet's head server (and ``options``)."""
    (work / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return subprocess.Popen(
        [
            str(nemo_python.parent / "ng_collect_rollouts"),
            f"+head_server.host={state.head.host}",
            f"+head_server.port={state.head.port}",
            f"+input_jsonl_fpath={work / 'in.jsonl'}",
            f"+output_jsonl_fpath={work / 'out.jsonl'}",
            *options,
        ],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )


def collected(work: Path) -> dict[int, dict[str, Any]]:
    out = work / "out.jsonl"
    lines = out.read_text().splitlines() if out.is_file() else []
    return {r["_ng_task_index"]: r for r in map(json.loads, lines)}


class Progress:
    """Reads a running ``ngym profile`` in threads: its progress lines (stderr, its rollouts so far) and its
    result (stdout; read as it comes, so a large result never blocks the process on a full pipe)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process, self.rollouts, self.out = process, 0, ""
        self.lines: list[str] = []
        self.readers = [threading.Thread(target=f, daemon=True) for f in (self._progress, self._result)]
        for reader in self.readers:
            reader.start()

    def _progress(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip())
            found = re.search(r"users\s+(\d+) rollouts", line)
            if found:
                self.rollouts = int(found.group(1))

    def _result(self) -> None:
        assert self.process.stdout is not None
        self.out = self.process.stdout.read()

    def finish(self) -> str:
        """Its stdout (the JSON result), once it has exited."""
        for reader in self.readers:
            reader.join(timeout=10)
        return self.out


def profile_data(env: str, nemo_python: Path) -> Path:
    nemo = {"nemo_counter": "example_session_state_mgmt", "nemo_turns": "example_multi_turn_gymnasium"}
    if env in nemo:
        return nemo_data(nemo_python, nemo[env]) / "example_rollouts.jsonl"
    folder = {"counter_redis": "example_session_state_mgmt", "workplace": "workplace_assistant"}.get(
        env, "math_with_code"
    )
    return REPO / "resources_servers" / folder / "data" / "example_rollouts.jsonl"


def test_one_fleet_of_five_environments_over_hosts_loses_a_host_without_a_wrong_reward(
    cluster: Cluster, nemo_ray: NemoRay, nemo_python: Path, tmp_path: Path
) -> None:
    path = fleet_file(tmp_path, cluster, nemo_python, nemo_ray.address)
    spec = load_fleet(path)
    # The nodes' virtualenvs are made ahead, here, where PyPI is reachable (the hosts have no route out), as a
    # cluster's node image would hold them; the actors find them by the same key and reuse them.
    for name, env in spec.environments.items():
        lines = env.isolation_key(spec.base_dir, name)
        if lines:
            ensure_venv(lines, tmp_path / f"{name}.venv.log")

    started = time.monotonic()
    nemo_ray.wait()  # NeMo's environment servers start Ray: one for them all
    mark = {RUN_MARK: PREFIX}  # ngym up's servers: run on the machine; a killed run's are found by it
    up = ngym("up", str(path), cwd=tmp_path, timeout=600, env={**ENV, "RAY_ADDRESS": nemo_ray.address, **mark})
    run_fleet(cluster, nemo_python, tmp_path, path, spec, up, started)


NEMO_RAY_PREFIX = "i20enemo-"


class NemoRay:
    """One Ray instance for NeMo Gym's own servers, from NeMo's venv, on the machine.

    NeMo's legacy-agent environment servers call ``ray.init()`` at start-up and each starts a Ray cluster of
    its own unless ``RAY_ADDRESS`` names one (as ``ng_run`` arranges): four starting at once on this loaded
    machine timed out. They cannot join the fleet's cluster either: a different Python (3.13) than ngym's.
    Started once the cluster is up (two Ray start-ups at once time out here), waited for before ``ngym up``.
    """

    def __init__(self, nemo_python: Path) -> None:
        self.ray = str(nemo_python.parent / "ray")
        # What a run killed outright left: NeMo's Ray runs on the machine, not in a namespace, so the hosts'
        # clean-up does not reach it; its processes carry their temp folder in their command lines.
        kill_marked(f"/tmp/{NEMO_RAY_PREFIX}")
        for stale in Path("/tmp").glob(f"{NEMO_RAY_PREFIX}*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.temp = tempfile.mkdtemp(prefix=NEMO_RAY_PREFIX, dir="/tmp")
        self.port = free_port()
        self.address, self.log = f"127.0.0.1:{self.port}", Path(self.temp) / "ray.log"
        self.start()

    def start(self) -> None:
        with self.log.open("wb") as log:
            self.head = subprocess.Popen(
                [self.ray, "start", "--head", f"--port={self.port}", "--num-cpus=1", "--node-ip-address=127.0.0.1"]
                + [f"--temp-dir={self.temp}", "--include-dashboard=false", "--disable-usage-stats", "--block"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=ENV,
                start_new_session=True,
            )

    def wait(self) -> None:
        """Until ``ray start`` prints its last start-up line (everything up), at most 180 s. Ray's start-up on
        this loaded machine sometimes times out on its own RPCs and exits: it is started again, twice at most."""
        deadline, restarts = time.monotonic() + 180, 2
        while "block forever" not in self.log.read_text(errors="replace"):
            if self.head.poll() is not None:
                assert restarts, f"NeMo's Ray head exited: {self.log.read_text()[-2000:]}"
                restarts -= 1
                with contextlib.suppress(ProcessLookupError):  # what it started before it gave up
                    os.killpg(self.head.pid, signal.SIGKILL)
                self.start()
            assert time.monotonic() < deadline, f"NeMo's Ray head did not start: {self.log}"
            time.sleep(0.5)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.head.pid, signal.SIGKILL)
        self.head.wait()
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture
def nemo_ray(nemo_python: Path) -> Iterator[NemoRay]:
    made = NemoRay(nemo_python)
    try:
        yield made
    finally:
        made.stop()


def run_fleet(
    cluster: Cluster,
    nemo_python: Path,
    tmp_path: Path,
    path: Path,
    spec: FleetSpec,
    up: subprocess.CompletedProcess[str],
    started: float,
) -> None:
    state = FleetState.load(tmp_path / ".ngym-fleet" / "i20e-fleet")
    assert state is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        print(f"\nngym up: {time.monotonic() - started:.1f} s")
        envs = list(spec.environments)
        holder = cluster.holders({n: state.servers[n].replicas[0].node for n in envs})
        addresses = {cluster.hosts.address(h) for h in ("node1", "node2")}
        assert {state.servers[n].replicas[0].host for n in envs} == addresses  # on both worker hosts, none on head
        # each one URL: the front's HAProxy on the head node (one backend for one replica)
        assert {state.servers[n].host for n in envs} == {cluster.hosts.address("head")}
        dead = holder["nemo_counter"]
        lost = sorted(n for n in envs if holder[n] == dead)
        kept = sorted(n for n in envs if holder[n] != dead)
        print("placement:", holder, "| killing", dead, "holding", lost)

        # 1. NeMo Gym's own collector over the healthy fleet: every row scores its recorded reward
        rows, expected = collector_rows(nemo_python)
        first = tmp_path / "collect1"
        first.mkdir()
        run = collect(nemo_python, state, rows, first)
        output, _ = run.communicate(timeout=300)
        assert run.returncode == 0, output[-3000:]
        got = collected(first)
        assert len(got) == len(rows)
        wrong = [
            (i, env, want, got[i].get("reward"))
            for i, (env, want) in enumerate(expected)
            if got[i].get("reward") != want
        ]
        assert not wrong, wrong
        assert not any(r.get("mask_sample") for r in got.values())
        print(f"collector, healthy fleet: {len(got)}/{len(rows)} rollouts, every reward the recorded one")

        # 2. Locust on every environment and the collector again; the host of nemo_counter dies a third in
        head = f"http://{state.head.host}:{state.head.port}"
        profiles: dict[str, subprocess.Popen[str]] = {}
        for env in envs:
            users = max(2, round(USERS * SHARE[env]))
            profiles[env] = subprocess.Popen(
                [sys.executable, "-m", "ngym.cli", "profile", env, "--fleet", head, "--users", str(users)]
                + ["--duration", f"{SECONDS}s", "--json", "--data", str(profile_data(env, nemo_python))],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
            )
        progress = {env: Progress(process) for env, process in profiles.items()}
        rows2, expected2 = collector_rows(nemo_python, repeat=3)
        second = tmp_path / "collect2"
        second.mkdir()
        # NeMo's own option for a run that loses rows: a failed rollout goes to its failures file and the run goes
        # on (by default NeMo ends the whole run at the first failed rollout, the survivors' rows unwritten)
        run2 = collect(nemo_python, state, rows2, second, "+route_failures_to_sidecar=true")
        # the kill comes once every environment has finished rollouts under load (Locust's start-up is slow
        # with five at once on two cores: a fixed delay killed the host before some had begun)
        deadline = time.monotonic() + 120
        while not all(p.rollouts > 0 for p in progress.values()):
            assert time.monotonic() < deadline, {env: p.lines[-3:] for env, p in progress.items()}
            time.sleep(0.5)
        before = {env: p.rollouts for env, p in progress.items()}
        killed = cluster.hosts.kill(dead)
        killed_at = time.monotonic()
        print(f"killed host {dead}: {killed} processes; rollouts so far {before}")
        results: dict[str, dict[str, Any]] = {}
        for env, process in profiles.items():
            process.wait(timeout=SECONDS + 120)  # never a hang
            out = progress[env].finish()
            assert out.strip(), f"{env}: ngym profile printed no result: {progress[env].lines[-10:]}"
            results[env] = json.loads(out)
        profiled = time.monotonic() - killed_at

        # 3. the survivors: every rollout right, none failed; the lost: loud, never a wrong reward
        for env in envs:
            r = results[env]
            counts = {k: r[k] for k in ("users", "rollouts_finished", "rollouts_failed", "reward_mismatches")}
            counts["masked"] = r["judge_failures"]
            print(f"profile {env} ({holder[env]}{', killed' if env in lost else ''}): {counts}")
        print(f"profiles: {sum(r['users'] for r in results.values())} concurrent users in all")
        for env in kept:
            r = results[env]
            assert r["rollouts_finished"] > 0 and r["rollouts_failed"] == 0 and r["reward_mismatches"] == 0, (
                env,
                {k: r[k] for k in ("rollouts_finished", "rollouts_failed", "reward_mismatches", "errors")},
            )
        for env in lost:
            r = results[env]
            # a reward that differs from the recording only on a verify marked as failed (masked session_lost)
            assert r["reward_mismatches"] <= r["judge_failures"], (env, r)
            assert r["rollouts_failed"] > 0, (env, r)  # the host died under it: loud

        # NeMo's collector FINISHES: every environment's URL is the front's HAProxy on the head node, which
        # answers a dead node's environment with 503 at once (a refused connection, which NeMo's client retries
        # without end, never reaches it). NeMo writes each row that ran to out.jsonl and each that failed to its
        # failures sidecar (out_failures.jsonl, no reward). Every row ends in one of them.
        try:
            output2, _ = run2.communicate(timeout=COLLECTOR_WAIT)
        except subprocess.TimeoutExpired:
            run2.kill()
            pytest.fail(f"NeMo's collector still ran {COLLECTOR_WAIT} s after the profiles ended (a hang)")
        collected_at = time.monotonic() - killed_at

        def lines(name: str) -> list[dict[str, Any]]:
            out = second / name
            return [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []

        def key(row: dict[str, Any]) -> tuple[int, int]:
            return row["_ng_task_index"], row.get("_ng_rollout_index", 0)

        right = masked_rows = 0
        seen: dict[str, int] = {}
        ended: set[tuple[int, int]] = set()
        for row in lines("out.jsonl"):
            env, want = expected[row["_ng_task_index"]]  # NeMo numbers the distinct rows
            seen[env] = seen.get(env, 0) + 1
            ended.add(key(row))
            if row.get("mask_sample"):
                assert env in lost and row.get("failure_kind"), (env, row.get("failure_kind"))
                masked_rows += 1
                continue
            assert row.get("reward") == want, (env, want, row.get("reward"))
            right += 1
        failed: dict[str, int] = {}
        for row in lines("out_failures.jsonl"):  # one per attempt: no reward, a failure class
            env, _ = expected[row["_ng_task_index"]]
            assert env in lost, (env, row.get("_ng_failure_class"), row.get("_ng_failure_message"))
            assert row.get("_ng_failure_class") and row.get("reward") is None, row
            if key(row) not in ended:
                failed[env] = failed.get(env, 0) + 1
                ended.add(key(row))
        want_kept = {env: sum(1 for e, _ in expected2 if e == env) for env in kept}
        for env, n in want_kept.items():  # every row of a surviving environment came back, right
            assert seen.get(env, 0) == n, (env, seen, want_kept, output2[-3000:])
        assert len(ended) == len(rows2), (len(ended), len(rows2), output2[-3000:])  # every row ended
        assert sum(failed.values()) > 0, output2[-3000:]  # the dead host's rows failed, loudly
        print(
            f"collector, host killed mid-run: finished (exit {run2.returncode}) {collected_at:.0f} s after the "
            f"kill: {right} right, {masked_rows} masked, {sum(failed.values())} failed {failed} (NeMo's failures "
            f"file) of {len(rows2)}; profiles ended {profiled:.0f} s after the kill"
        )

        status = ngym("status", str(path), "--json", "--interval", "0", cwd=tmp_path)
        health = {r["name"]: r["health"] for r in json.loads(status.stdout)}
        assert all(health[n] == "down" for n in lost) and all(health[n] == "ok" for n in kept), health
        assert status.returncode == 1
    finally:
        down = ngym("down", str(path), cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    processes = [r.process for r in [state.head, *state.servers.values()] if r.process is not None]
    assert not [p.pid for p in processes if p.alive()]
