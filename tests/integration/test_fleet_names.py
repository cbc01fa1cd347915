"""``ngym rollout`` and ``ngym profile`` find an environment of a running fleet by its name (``--fleet``).

One real local fleet (``ngym up``, two built-ins, no virtualenvs) serves every test of the module; the name is
resolved through the head server's ``/global_config_dict_yaml``, as NeMo Gym's client does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ngym.child_server import free_port
from ngym.fleet.state import FleetState
from ngym.targets import resolve

ROOT_ENV = {**os.environ, "NGYM_PROGRESS_SECONDS": "2"}


def ngym(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=ROOT_ENV
    )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FleetState]]:
    """A running fleet ``names``: ``counter`` (session state) and ``weather``, behind a head server."""
    root = tmp_path_factory.mktemp("fleet")
    spec = {
        "name": "names",
        "head_server": {"port": 0},
        "environments": {"counter": "example_session_state_mgmt", "weather": "example_single_tool_call"},
    }
    (root / "fleet.yaml").write_text(json.dumps(spec))
    up = ngym("up", "fleet.yaml", cwd=root)
    state = FleetState.load(root / ".ngym-fleet" / "names")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert state is not None
        yield root, state
    finally:
        down = ngym("down", "fleet.yaml", cwd=root)
        assert down.returncode == 0, down.stderr


def _status(root: Path) -> dict[str, dict[str, Any]]:
    done = ngym("status", "fleet.yaml", "--json", "--interval", "0", cwd=root)
    return {row["name"]: row for row in json.loads(done.stdout)}


def test_rollout_by_name_through_the_fleet_file(fleet: tuple[Path, FleetState], tmp_path: Path) -> None:
    root, state = fleet
    folder = resolve("example_session_state_mgmt").folder
    assert folder is not None
    data = folder / "data" / "example.jsonl"  # the replay model replays data/example_rollouts.jsonl beside it
    before = _status(root)["counter"]["verified"]
    output = tmp_path / "out.jsonl"
    done = ngym(
        "rollout", "counter", "--fleet", "fleet.yaml", "--data", str(data), "--model", "replay",
        "--output", str(output), "--json", cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["done"] == 5 and summary["mean_reward"] == 1.0 and not summary["failed"]
    # the fleet's counter server verified them: ngym did not start an environment of its own
    assert _status(root)["counter"]["verified"] == before + 5
    assert _status(root)["weather"]["verified"] == 0


def test_rollout_by_the_fleets_name_without_data_uses_the_environments_example_data(
    fleet: tuple[Path, FleetState],
) -> None:
    """``counter`` is the fleet's name for ``example_session_state_mgmt``: its example data is found through the
    fleet's state (the interpreter that serves it), as ``ngym profile counter --fleet`` finds it."""
    root, _ = fleet
    done = ngym("rollout", "counter", "--fleet", "fleet.yaml", "--model", "replay", "--json", cwd=root)
    assert done.returncode == 0, done.stderr
    assert "example_session_state_mgmt/data/example.jsonl" in done.stderr
    summary = json.loads(done.stdout)
    assert summary["done"] == 5 and summary["mean_reward"] == 1.0 and not summary["failed"]


def test_profile_by_name_through_the_head_url_and_the_state_dir(fleet: tuple[Path, FleetState]) -> None:
    root, state = fleet
    head = f"http://127.0.0.1:{state.head.port}"
    weather = f"http://127.0.0.1:{state.servers['weather'].port}"
    for where in (head, str(root / ".ngym-fleet" / "names")):
        done = ngym("profile", "weather", "--fleet", where, "--users", "2", "--duration", "1s", "--json", cwd=root)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["target"] == weather and result["rollouts_finished"] > 0
        assert "starting" not in done.stderr  # ngym did not start a server of its own


def test_an_unknown_name_is_one_line_with_a_did_you_mean(fleet: tuple[Path, FleetState], tmp_path: Path) -> None:
    root, state = fleet
    head = f"http://127.0.0.1:{state.head.port}"
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"responses_create_params": {"input": "x"}}\n')
    for command in (
        ("rollout", "countr", "--fleet", head, "--data", str(rows), "--model", "replay"),
        ("profile", "wether", "--fleet", "fleet.yaml", "--duration", "1s"),
    ):
        done = ngym(*command, cwd=root)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        wanted = "counter" if command[1] == "countr" else "weather"
        assert f"no environment {command[1]!r}; did you mean {wanted!r}?" in lines[0]
        assert "it has: counter, weather" in lines[0]


def test_an_unreachable_head_server_is_one_line(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    for command in (("profile", "weather", "--duration", "1s"), ("rollout", "weather", "--data", "x.jsonl")):
        done = ngym(*command, "--fleet", nobody, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().splitlines() == [done.stderr.strip()]
        assert f"no fleet head server answers at {nobody}" in done.stderr
    # a fleet file that was never brought up says so
    (tmp_path / "fleet.yaml").write_text(
        json.dumps({"name": "idle", "environments": {"w": "example_single_tool_call"}})
    )
    done = ngym("profile", "w", "--fleet", "fleet.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "is not up" in done.stderr and "Traceback" not in done.stderr
