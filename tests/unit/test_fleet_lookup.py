"""Finding a fleet's server by name through a head server (``ngym.fleet.lookup``), over real HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngym.fleet.global_config import dump
from ngym.fleet.head import create_head_app
from ngym.fleet.lookup import FleetLookupError, fleet_target, server_url
from ngym.fleet.state import FleetState, ServerRecord
from ngym.rollout.thread_server import serve_app_in_thread

CONFIG = {
    "head_server": {"host": "127.0.0.1", "port": 1},
    "dry_run": False,
    "weather": {"resources_servers": {"example_single_tool_call": {"host": "127.0.0.1", "port": 9101}}},
    "everywhere": {"resources_servers": {"mcqa": {"host": "0.0.0.0", "port": 9102, "domain": "knowledge"}}},
    "weather_agent": {"responses_api_agents": {"simple_agent": {"host": "127.0.0.1", "port": 9103}}},
}


def test_names_resolve_through_the_served_global_config(tmp_path: Path) -> None:
    (tmp_path / "global_config.yaml").write_text(dump(CONFIG))
    with serve_app_in_thread(create_head_app(tmp_path / "global_config.yaml", tmp_path / "none.json")) as head:
        assert server_url(head, "weather") == "http://127.0.0.1:9101"
        assert server_url(head + "/", "everywhere") == "http://127.0.0.1:9102"  # a wildcard: the head's host
        assert fleet_target("weather", head) == "http://127.0.0.1:9101"
        assert fleet_target("weather", None) == "weather"  # no --fleet: TARGET as given
        with pytest.raises(FleetLookupError, match=r"no environment 'wether'; did you mean 'weather'\? \(it has: "):
            server_url(head, "wether")
        with pytest.raises(FleetLookupError, match="'weather_agent' .* is not an environment"):
            server_url(head, "weather_agent")
        with pytest.raises(FleetLookupError, match="not a URL"):
            fleet_target(head, head)

        # the state dir names the head server ``up`` started
        head_port = int(head.rsplit(":", 1)[1])
        FleetState(name="f", engine="local", head=ServerRecord(kind="head", host="0.0.0.0", port=head_port)).save(
            tmp_path / "state"
        )
        assert server_url(str(tmp_path / "state"), "weather") == "http://127.0.0.1:9101"


def test_a_head_server_still_starting_is_one_error(tmp_path: Path) -> None:
    app = create_head_app(tmp_path / "absent.yaml", tmp_path / "none.json")
    with serve_app_in_thread(app) as head, pytest.raises(FleetLookupError, match="answered 503: the fleet is still"):
        server_url(head, "weather")


def test_a_state_dir_that_is_not_up_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(FleetLookupError, match="is not up"):
        server_url(str(tmp_path), "weather")
    with pytest.raises(FleetLookupError, match="no such fleet file or state dir"):
        server_url(str(tmp_path / "missing"), "weather")
