"""The trainer venv (tools/trainer_venv.sh) and ngym servers as real processes, for the verl and SkyRL tests."""

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
RESULT = "NGYM-RESULT "


@pytest.fixture(scope="session")
def verl_python(trainer_python: Path) -> Path:
    """The trainer venv's python (verl 0.9.1 and skyrl-gym 0.4.0 are there; tests/conftest.py makes it)."""
    return trainer_python


@pytest.fixture(scope="session")
def in_verl(verl_python: Path) -> Callable[..., Any]:
    """``run(script, payload, timeout=600)``: run a script in the trainer venv (the checkout on PYTHONPATH) with
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
