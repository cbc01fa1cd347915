"""``ngym up`` and ``ngym down`` on the ray engine with a Ray address nothing answers at: one clear line and a
non-zero exit at once (Ray's client retried without end: ``ngym up`` printed Ray's warnings for 4 minutes and more
until it was killed). No cluster is needed: the address is a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="pip install 'ngym[ray]'")

from ngym.child_server import free_port  # noqa: E402 (after the importorskip)
from ngym.fleet.state import FleetState, ServerRecord  # noqa: E402

NGYM = str(Path(sys.executable).with_name("ngym"))


@pytest.mark.parametrize("command", ["up", "down"])
def test_an_unreachable_ray_address_is_one_line_at_once(tmp_path: Path, command: str) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("name: unreachable\nengine: ray\nenvironments:\n  weather: example_single_tool_call\n")
    address = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    if command == "down":  # a fleet whose state names the address (an `up` that reached it, the cluster gone since)
        head = ServerRecord(kind="head", host="127.0.0.1", port=1, service="unreachable/head")
        FleetState(name="unreachable", engine="ray", head=head, ray_address=address).save(
            tmp_path / ".ngym-fleet" / "unreachable"
        )
    done = subprocess.run([NGYM, command, str(fleet)], capture_output=True, text=True, env=env, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert f"no Ray cluster answers at {address}" in said and "Traceback" not in said, said
