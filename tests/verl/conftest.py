"""The verl venv (tools/verl_venv.sh) and ngym servers as real processes, for the verl and SkyRL tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "verl_venv.sh"
RESULT = "NGYM-RESULT "


@pytest.fixture(scope="session")
def verl_python() -> Path:
    """The verl venv's python. Outside CI a venv not yet made skips (~6 GB, several minutes); under CI=true it is
    made, and a failure to make it fails the test."""
    in_ci = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
    if not in_ci:
        ready = subprocess.run(["bash", str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
        if ready.returncode != 0:
            pytest.skip("no verl venv yet (make it with tools/verl_venv.sh, several minutes)")
    made = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=3600)
    if made.returncode != 0:
        pytest.fail(f"tools/verl_venv.sh failed: {made.stderr.strip()[-2000:]}")
    return Path(made.stdout.strip().splitlines()[-1]) / "bin" / "python"


@pytest.fixture(scope="session")
def in_verl(verl_python: Path) -> Callable[..., Any]:
    """``run(script, payload, timeout=600)``: run a script in the verl venv (the checkout on PYTHONPATH) with
    ``payload`` as JSON on stdin; its ``NGYM-RESULT <json>`` line, parsed."""

    def run(script: Path, payload: dict[str, Any], timeout: float = 600) -> Any:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
        done = subprocess.run(
            [str(verl_python), str(script)], input=json.dumps(payload), capture_output=True, text=True,
            timeout=timeout, env=env, cwd=str(ROOT),
        )  # fmt: skip
        lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
        assert done.returncode == 0 and lines, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
        return json.loads(lines[-1][len(RESULT) :])

    return run


@pytest.fixture(scope="module")
def serve() -> Iterator[Callable[[str], str]]:
    """``serve(name)``: ``ngym run NAME`` as a real process on a free port; its URL. Stopped after the module."""
    from ngym.child_server import free_port, stop_process, wait_healthy

    servers: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}

    def start(name: str) -> str:
        if name not in servers:
            port = free_port()
            process = subprocess.Popen(
                [sys.executable, "-m", "ngym.cli", "run", name, "--port", str(port)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            url = f"http://127.0.0.1:{port}"
            servers[name] = (url, process)
            wait_healthy(url, process, 120)
        return servers[name][0]

    try:
        yield start
    finally:
        for _url, process in servers.values():
            stop_process(process)
