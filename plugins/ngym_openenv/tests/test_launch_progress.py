"""A slow or stuck OpenEnv server: the wait shows progress, and every message names the server's log."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from threading import Thread

import pytest
from ngym_openenv import launch


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def retrying_server(tmp_path: Path) -> Iterator[launch.OpenEnvProcess]:
    """A process that says it is retrying a download and never serves (as DIPG's did for 540 s)."""
    code = "import time; print('retrying the Hugging Face download (attempt 3)', flush=True); time.sleep(600)"
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log = tmp_path / "server.log"
    running = launch.OpenEnvProcess(process, f"http://127.0.0.1:{_closed_port()}", deque(maxlen=40), log)
    Thread(target=launch._drain, args=(process, running.output, log.open("w")), daemon=True).start()
    for _ in range(600):  # until the line is read (bounded: 60 s)
        if running.output:
            break
        time.sleep(0.1)
    yield running
    running.stop()


def test_a_server_that_never_answers_names_its_log_and_last_line(
    retrying_server: launch.OpenEnvProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "PROGRESS_EVERY_S", 0.0)
    said: list[str] = []
    with pytest.raises(launch.LaunchError) as raised:
        launch._wait_ready(retrying_server, timeout=0.5, progress=said.append)
    message = str(raised.value)
    assert f"its log: {retrying_server.log}" in message
    assert "its last line: retrying the Hugging Face download (attempt 3)" in message
    assert (
        said and "waiting for the OpenEnv server to answer /schema" in said[0] and str(retrying_server.log) in said[0]
    )
    assert "retrying the Hugging Face download" in Path(str(retrying_server.log)).read_text()
