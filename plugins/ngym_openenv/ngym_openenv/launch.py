"""Start an OpenEnv environment's own server (its app, in its own virtualenv) on a loopback socket.

The environment runs exactly as ``uvicorn server.app:app`` runs it under OpenEnv, in the interpreter its
requirements were installed into, so its pins never meet ngym's (OpenEnv needs ``fastmcp>=3``; ngym pins
``mcp<2``). The listening socket is bound here, on port 0, and handed to uvicorn (``--fd``): no port is
guessed, and none can be taken by someone else between choosing and binding it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from threading import Thread

import httpx

from ngym import NgymError


class LaunchError(NgymError):
    """The OpenEnv server did not start (its output's last lines say why)."""


@dataclass
class OpenEnvProcess:
    """A running OpenEnv server started by ``start``; ``stop()`` ends it."""

    process: subprocess.Popen[str]
    url: str
    output: deque[str] = field(default_factory=lambda: deque(maxlen=40))

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(
    python: str,
    app: str,
    *,
    app_dir: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
) -> OpenEnvProcess:
    """Serve ``app`` (``module:attribute``) with uvicorn in ``python``'s environment; wait until it answers."""
    if not Path(python).is_file():
        raise LaunchError(f"the environment's interpreter {python} is missing: reinstall it (ngym install openenv:...)")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    command = [python, "-m", "uvicorn", app, "--fd", str(sock.fileno()), "--log-level", "warning", "--ws", "auto"]
    if app_dir:
        command += ["--app-dir", app_dir]
    child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    child_env.pop("VIRTUAL_ENV", None)  # ngym's; the environment's interpreter finds its own site-packages
    try:
        process = subprocess.Popen(
            command,
            pass_fds=(sock.fileno(),),
            cwd=app_dir or None,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    finally:
        sock.close()  # the child holds its own copy
    running = OpenEnvProcess(process, f"http://127.0.0.1:{port}")
    Thread(target=_drain, args=(process, running.output), daemon=True).start()
    _wait_ready(running, timeout)
    return running


def _drain(process: subprocess.Popen[str], tail: deque[str]) -> None:
    """Keep the server's last lines (for errors) and never let its pipe fill up."""
    assert process.stdout is not None
    for line in process.stdout:
        tail.append(line.rstrip())


def _wait_ready(running: OpenEnvProcess, timeout: float) -> None:
    """Until ``GET /schema`` answers (every OpenEnv app has it); a dead process or the timeout is a LaunchError."""
    deadline = time.monotonic() + timeout
    while True:
        if running.process.poll() is not None:
            time.sleep(0.2)  # let _drain read the last lines
            tail = "\n  ".join(list(running.output)[-15:]) or "(no output)"
            raise LaunchError(f"the OpenEnv server exited with code {running.process.returncode}:\n  {tail}")
        try:
            if httpx.get(f"{running.url}/schema", timeout=5.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            running.stop()
            raise LaunchError(f"the OpenEnv server did not answer within {timeout:g} s")
        time.sleep(0.2)
