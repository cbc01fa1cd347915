"""A fleet brought up by ``ngym up``, driven by NeMo Gym 0.7.0's own collector through the fleet's head server.

The fleet: two built-ins and an environment folder, ``ngym replay-model`` as the policy model, and NeMo Gym's own
Simple Agents (from its venv, started as ``gym env start`` starts them), written as docs/scale-out.md shows
them: agents only; the fleet adds the legacy-agent environment server NeMo Gym's collector needs for each.
``ng_collect_rollouts`` is given only the head server's address: every server is found by name in the global
config the fleet serves, which has no placeholder entries. Then ``ngym down`` leaves no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from ngym.fleet.state import FleetState

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "resources_servers"
#: agent name -> (environment in the fleet, its rows, the recorded rewards of those rows or None: all 1.0)
AGENTS = {
    "weather_agent": ("weather", DATA / "example_single_tool_call" / "data"),
    "counter_agent": ("counter", DATA / "example_session_state_mgmt" / "data"),
    "seed_agent": ("seed", DATA / "example_single_tool_call" / "data"),  # the seed's weather: always 1.0
}


def fleet_file(tmp_path: Path, nemo_python: Path) -> Path:
    site = Path(
        subprocess.run(
            [
                str(nemo_python),
                "-c",
                "import responses_api_agents, os; print(os.path.dirname(responses_api_agents.__path__[0]))",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    servers: dict[str, Any] = {
        "policy_model": {
            "responses_api_models": {"replay": {}},
            "launch": {
                "command": [
                    sys.executable,
                    "-m",
                    "ngym.cli",
                    "replay-model",
                    "--env",
                    "example_single_tool_call",
                    "--env",
                    "example_session_state_mgmt",
                    "--host",
                    "{host}",
                    "--port",
                    "{port}",
                ]  # fmt: skip
            },
        }
    }
    for agent, (env, _) in AGENTS.items():
        servers[agent] = {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": env},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                }
            },
            "launch": {"python": str(nemo_python), "dir": str(site / "responses_api_agents" / "simple_agent")},
        }
    fleet = {
        "name": "nemo-collect",
        "head_server": {"port": 0},
        "environments": {
            "weather": "example_single_tool_call",
            "counter": {"env": "example_session_state_mgmt", "config": {"session_ttl_seconds": 600}},
            "seed": str(REPO / "tests" / "fixtures" / "seed_weather"),
        },
        "servers": servers,
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    return path


def ngym(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_nemo_gyms_collector_drives_a_fleet_found_by_name(tmp_path: Path, nemo_python: Path) -> None:
    path = fleet_file(tmp_path, nemo_python)
    up = ngym("up", str(path), cwd=tmp_path)
    state = FleetState.load(tmp_path / ".ngym-fleet" / "nemo-collect")
    assert state is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert {f"{agent}_env" for agent in AGENTS} <= {n for n, r in state.servers.items() if r.ok}
        head = f"http://{state.head.host}:{state.head.port}"
        with urllib.request.urlopen(f"{head}/global_config_dict_yaml", timeout=10) as response:
            served = yaml.safe_load(json.loads(response.read()))
        for env in ("weather", "counter", "seed"):
            ((impl, entry),) = served[env]["resources_servers"].items()
            assert entry == {"host": "127.0.0.1", "port": state.servers[env].port, "domain": "agent"}
        assert "entrypoint" not in json.dumps({k: served[k] for k in ("weather", "counter", "seed")})

        rows, expected = _rows()
        (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        collect = _collect(nemo_python, state, tmp_path)
        assert collect.returncode == 0, collect.stdout[-3000:] + collect.stderr[-3000:]
        out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
        got = {r["_ng_task_index"]: r for r in out}
        assert len(out) == len(rows) == 17
        assert [got[i]["reward"] for i in range(len(rows))] == expected
        assert not any(r.get("mask_sample") for r in out)

        status = ngym("status", str(path), "--json", "--interval", "0", cwd=tmp_path)
        assert status.returncode == 0, status.stdout + status.stderr
        by_name = {row["name"]: row for row in json.loads(status.stdout)}
        assert (by_name["weather"]["verified"], by_name["counter"]["verified"], by_name["seed"]["verified"]) == (
            6,
            5,
            6,
        )
        assert by_name["counter"]["errors"] == 0 and by_name["weather_agent"]["health"] == "ok"
    finally:
        down = ngym("down", str(path), cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    processes = [r.process for r in [state.head, *state.servers.values()] if r.process is not None]
    assert len(processes) == 11
    assert not [p.pid for p in processes if p.alive()]


def _collect(nemo_python: Path, state: FleetState, work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """NeMo Gym's ``ng_collect_rollouts`` over ``work/in.jsonl`` into ``work/out.jsonl``, given only the head
    server's address."""
    return subprocess.run(
        [
            str(nemo_python.parent / "ng_collect_rollouts"),
            f"+head_server.host={state.head.host}",
            f"+head_server.port={state.head.port}",
            f"+input_jsonl_fpath={work / 'in.jsonl'}",
            f"+output_jsonl_fpath={work / 'out.jsonl'}",
            *extra,
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_COLOR": "1"},
    )


def _rows() -> tuple[list[dict[str, Any]], list[float]]:
    """Every agent's example rows (naming their agent) and the reward recorded for each."""
    rows, expected = [], []
    for agent, (_, data) in AGENTS.items():
        recorded = [json.loads(line) for line in (data / "example_rollouts.jsonl").read_text().splitlines()]
        for line, record in zip((data / "example.jsonl").read_text().splitlines(), recorded, strict=True):
            rows.append({**json.loads(line), "agent_ref": {"type": "responses_api_agents", "name": agent}})
            expected.append(1.0 if agent == "seed_agent" else record["reward"])
    return rows, expected


def test_with_a_dead_unit_on_the_local_engine_nemo_gyms_collector_finishes(tmp_path: Path, nemo_python: Path) -> None:
    """The local engine's front answers a dead unit's requests 503 at once: NeMo Gym's collector (which retries a
    refused connection without end) finishes, the dead environment's rows in its failures file, the others right."""
    path = fleet_file(tmp_path, nemo_python)
    up = ngym("up", str(path), cwd=tmp_path)
    state = FleetState.load(tmp_path / ".ngym-fleet" / "nemo-collect")
    assert state is not None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        counter = state.servers["counter"].process
        assert counter is not None and state.servers["counter"].front is not None
        os.killpg(counter.pid, signal.SIGKILL)  # the unit dies: every process of its group
        deadline = time.monotonic() + 60
        while counter.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        rows, expected = _rows()
        (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        # without the front it never finishes: _collect's bound is then the test's failure, not a wait
        collect = _collect(nemo_python, state, tmp_path, "+route_failures_to_sidecar=true")
        assert collect.returncode == 0, collect.stdout[-3000:] + collect.stderr[-3000:]
        out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
        failed = [json.loads(line) for line in (tmp_path / "out_failures.jsonl").read_text().splitlines()]
        counter_rows = sum(1 for r in rows if r["agent_ref"]["name"] == "counter_agent")
        assert len(failed) == counter_rows == 5 and len(out) == len(rows) - counter_rows
        assert [r["reward"] for r in out] == [expected[r["_ng_task_index"]] for r in out]  # the survivors: right
        assert not any(r.get("mask_sample") for r in out)
        assert not [r for r in failed if "reward" in r and r["reward"] is not None]
    finally:
        down = ngym("down", str(path), cwd=tmp_path)
    assert down.returncode == 0, down.stderr
