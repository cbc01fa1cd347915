"""``ngym up`` / ``status`` / ``down`` on the local engine, as real processes.

Two environment folders pin conflicting versions of one package (one older than ngym's own copy, one equal to
it) and each sees its own in its own cached virtualenv; a broken environment is named with its reason while the
others come up; ``status`` counts rollouts; ``down`` leaves no process (uvicorn workers included) behind.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from ngym.fleet.state import FleetState

APP = '''
import importlib.metadata
from fastapi import FastAPI
from ngym import BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer


class Config(BaseResourcesServerConfig):
    pass


class Versions(SimpleResourcesServer):
    """Reports which sortedcontainers it imports."""

    config: Config

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/version")(self.version)
        return app

    async def version(self) -> dict:
        import sortedcontainers
        return {"version": importlib.metadata.version("sortedcontainers"), "file": sortedcontainers.__file__}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)
'''


def env_folder(root: Path, name: str, requirement: str) -> Path:
    folder = root / name
    (folder / "configs").mkdir(parents=True)
    (folder / "app.py").write_text(APP)
    (folder / "requirements.txt").write_text(requirement + "\n")
    config = {name: {"resources_servers": {name: {"entrypoint": "app.py", "domain": "other"}}}}
    (folder / "configs" / f"{name}.yaml").write_text(json.dumps(config))
    return folder


def ngym(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ngym.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


def post(url: str, body: dict[str, Any] | None = None, cookie: str = "") -> tuple[dict[str, Any], str]:
    request = urllib.request.Request(
        url, data=json.dumps(body or {}).encode(), headers={"content-type": "application/json", "cookie": cookie}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read()), response.headers.get("set-cookie", "").split(";")[0]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "NGYM_FLEET_VENVS": str(tmp_path / "venvs"), "NGYM_PROGRESS_SECONDS": "2"}


def test_a_local_fleet_isolates_names_failures_counts_and_stops_everything(tmp_path: Path, env: dict[str, str]) -> None:
    env_folder(tmp_path, "old_sc", "sortedcontainers==2.3.0")
    env_folder(tmp_path, "new_sc", "sortedcontainers==2.4.0")
    (tmp_path / "fleet.yaml").write_text(
        json.dumps(
            {
                "name": "local",
                "head_server": {"port": 0},
                "environments": {
                    "counter": {
                        "env": "example_session_state_mgmt",
                        "workers": 2,  # status reads each worker
                        "config": {"session_ttl_seconds": 300},
                    },
                    "old": "./old_sc",
                    "new": "./new_sc",
                    "broken": {"env": "example_single_tool_call", "config": {"no_such_field": 1}},
                },
            }
        )
    )
    up = ngym("up", "fleet.yaml", cwd=tmp_path, env=env)
    state = FleetState.load(tmp_path / ".ngym-fleet" / "local")
    assert state is not None
    try:
        # the broken one is named with its reason (ngym run's own error line), the others are up; exit 1
        assert up.returncode == 1, up.stdout + up.stderr
        assert "broken" in up.stderr and "no_such_field" in state.servers["broken"].reason
        assert [n for n, r in state.servers.items() if r.ok] == ["counter", "old", "new"]
        assert "making its virtualenv" in up.stderr  # the slow step says what it does

        # each folder imports its own pinned version; conflicting requirements coexist
        old, _ = post(f"http://127.0.0.1:{state.servers['old'].port}/version")
        new, _ = post(f"http://127.0.0.1:{state.servers['new'].port}/version")
        assert old["version"] == "2.3.0" and str(tmp_path / "venvs") in old["file"]
        assert new["version"] == "2.4.0"

        # the served global config names the environments that came up, and only those
        head = f"http://127.0.0.1:{state.head.port}"
        with urllib.request.urlopen(f"{head}/global_config_dict_yaml", timeout=10) as response:
            served = yaml.safe_load(json.loads(response.read()))
        assert set(served) == {"head_server", "dry_run", "counter", "old", "new"}
        old_entry = {"host": "127.0.0.1", "port": state.servers["old"].port, "domain": "other"}
        assert served["old"] == {"resources_servers": {"old": old_entry}}

        # two counter rollouts: status shows them verified, and one still-open session
        counter = f"http://127.0.0.1:{state.servers['counter'].port}"
        for closes in (True, False):
            _, cookie = post(f"{counter}/seed_session", {"initial_count": 1})
            post(f"{counter}/increment_counter", {"count": 2}, cookie)
            if closes:
                row = {"responses_create_params": {"input": "x"}, "response": _response(), "expected_count": 3}
                post(f"{counter}/verify", row, cookie)
        status = ngym("status", "fleet.yaml", "--json", "--interval", "0", cwd=tmp_path, env=env)
        rows = {r["name"]: r for r in json.loads(status.stdout)}
        assert status.returncode == 1  # broken is not ok
        counted = rows["counter"]
        assert (counted["health"], counted["live_sessions"], counted["verified"]) == ("ok", 1, 1)
        # summed over its 2 workers, each a row of its own; the open session holds its one call's bytes
        assert counted["session_bytes"] == len(json.dumps({"count": 2})) and counted["reason"].startswith("2/2")
        parts = counted["parts"]
        assert [p["name"] for p in parts] == ["w0", "w1"] and sum(p["live_sessions"] for p in parts) == 1
        assert rows["broken"]["health"] == "failed" and rows["(head)"]["health"] == "ok"
        human = ngym("status", "fleet.yaml", "--interval", "0", cwd=tmp_path, env=env).stdout
        assert human.splitlines()[0].split()[:4] == ["server", "kind", "health", "sessions"]

        # a second `up` while it runs is refused in one line
        again = ngym("up", "fleet.yaml", cwd=tmp_path, env=env)
        assert again.returncode != 0 and "already up" in again.stderr and "Traceback" not in again.stderr
    finally:
        down = ngym("down", "fleet.yaml", cwd=tmp_path, env=env)
    assert down.returncode == 0, down.stderr
    started = [r.process for r in [state.head, *state.servers.values()] if r.process is not None]
    assert len(started) == 5 and not [p.pid for p in started if p.alive()]
    groups = subprocess.run(["ps", "-eo", "pgid="], capture_output=True, text=True).stdout.split()
    assert not {str(p.pid) for p in started} & set(groups)  # nothing of any group (workers, children) is left
    gone = ngym("status", "fleet.yaml", cwd=tmp_path, env=env)
    assert gone.returncode == 2 and "is not up" in gone.stderr


def test_a_server_whose_folder_is_missing_is_named_and_the_others_come_up(tmp_path: Path, env: dict[str, str]) -> None:
    """A NeMo server entry whose ``launch.dir`` does not exist failed all of ``up`` with a bare FileNotFoundError
    (found by the issue-20 end-to-end test): now it is named with its reason, like a failing environment."""
    missing = tmp_path / "no_such_agent"
    agent = {
        "responses_api_agents": {"simple_agent": {"entrypoint": "app.py"}},
        "launch": {"python": sys.executable, "dir": str(missing)},
    }
    fleet = {"name": "gone", "head_server": {"port": 0}, "environments": {"weather": "example_single_tool_call"}}
    (tmp_path / "fleet.yaml").write_text(json.dumps({**fleet, "servers": {"weather_agent": agent}}))
    up = ngym("up", "fleet.yaml", cwd=tmp_path, env=env)
    state = FleetState.load(tmp_path / ".ngym-fleet" / "gone")
    assert state is not None
    try:
        assert up.returncode == 1 and "Traceback" not in up.stderr, up.stdout + up.stderr
        assert f"weather_agent: FAILED: cannot start `{sys.executable}` in {missing}" in up.stderr
        assert state.servers["weather"].ok and state.head.process is not None
        status = ngym("status", "fleet.yaml", "--json", "--interval", "0", cwd=tmp_path, env=env)
        rows = {r["name"]: r["health"] for r in json.loads(status.stdout)}
        assert rows["weather"] == "ok" and rows["weather_agent"] != "ok"
    finally:
        down = ngym("down", "fleet.yaml", cwd=tmp_path, env=env)
    assert down.returncode == 0, down.stderr
    started = [r.process for r in [state.head, *state.servers.values()] if r.process is not None]
    assert len(started) == 2 and not [p.pid for p in started if p.alive()]


def _response() -> dict[str, Any]:
    return {
        "id": "r", "created_at": 0, "model": "m", "object": "response", "output": [],
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }  # fmt: skip


def test_a_head_server_port_another_process_holds_fails_up(tmp_path: Path, env: dict[str, str]) -> None:
    """`head_server: {port: P}` with another server on P: the head server could not listen, but that server answered
    the readiness poll, so `up` said the head was up there and exited 0, and `status` showed it ok, while NeMo Gym's
    clients pointed at it got the other server's 404s. Now the head is named FAILED with why, and `up` exits 1."""
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=other.serve_forever, daemon=True).start()  # answers GET / with 200, as a server would
    port = other.server_address[1]
    fleet = {"name": "taken", "head_server": {"port": port}, "environments": {"weather": "example_single_tool_call"}}
    (tmp_path / "fleet.yaml").write_text(json.dumps(fleet))
    try:
        up = ngym("up", "fleet.yaml", cwd=tmp_path, env=env)
        try:
            assert up.returncode == 1 and "Traceback" not in up.stderr, up.stdout + up.stderr
            assert f"(head): FAILED: cannot listen on 127.0.0.1:{port}" in up.stderr, up.stderr
            assert "head server:   FAILED" in up.stdout, up.stdout
            status = ngym("status", "fleet.yaml", "--json", "--interval", "0", cwd=tmp_path, env=env)
            rows = {r["name"]: r["health"] for r in json.loads(status.stdout)}
            assert rows == {"(head)": "failed", "weather": "ok"} and status.returncode == 1, status.stdout
        finally:
            down = ngym("down", "fleet.yaml", cwd=tmp_path, env=env)
        assert down.returncode == 0, down.stderr
    finally:
        other.shutdown()
        other.server_close()
