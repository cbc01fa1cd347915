"""Start an OpenEnv environment's own server (its app, in its own virtualenv) on a private or loopback socket.

The environment runs exactly as ``uvicorn server.app:app`` runs it under OpenEnv, in the interpreter its
requirements were installed into, so its pins never meet ngym's (OpenEnv needs ``fastmcp>=3``; ngym pins
``mcp<2``).

Served by ngym (``private=True``), it listens on a unix socket in a new folder only this user can enter (mode
0700, uvicorn ``--uds``): OpenEnv's server has no authentication, so nothing but this ngym server reaches it — no
other user, and no process talking TCP. For install-time probes and side-by-side runs (``private=False``) it
listens on loopback TCP: the socket is bound here, on port 0, and handed to uvicorn (``--fd``), so no port is
guessed, and none can be taken by someone else between choosing and binding it.

Its output goes to a log file (``OpenEnvProcess.log``, under ``~/.cache/ngym/openenv-logs`` unless given) as well
as to the last lines kept for errors; while it is not ready yet, ``progress`` is told every ``PROGRESS_EVERY_S``
seconds how long it has waited, the log's path and its last line (a server retrying a download says so there).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from threading import Thread
from typing import IO, Any

import httpx

from ngym import NgymError
from ngym.plugin_api import cache_dir


class LaunchError(NgymError):
    """The OpenEnv server did not start (its output's last lines say why)."""


#: how often a server that is not ready yet is reported on (seconds)
PROGRESS_EVERY_S = 15.0


def log_folder() -> Path:
    """Where OpenEnv servers' logs go (``NGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/ngym``, then ``openenv-logs``)."""
    return cache_dir() / "openenv-logs"


@dataclass
class OpenEnvProcess:
    """A running OpenEnv server started by ``start``; ``stop()`` ends it."""

    process: subprocess.Popen[str]
    url: str
    output: deque[str] = field(default_factory=lambda: deque(maxlen=40))
    log: Path | None = None  #: the file its whole output goes to
    uds: str | None = None  #: its unix socket, when it listens on one (``url`` is then ``http://localhost``)

    def client(self, timeout: float = 5.0) -> httpx.Client:
        """An HTTP client that reaches this server (through its unix socket when it has one)."""
        transport = httpx.HTTPTransport(uds=self.uds) if self.uds else None
        return httpx.Client(transport=transport, timeout=timeout)

    def where(self) -> str:
        """``its log: PATH; its last line: ...`` for a message about this server."""
        last = next((line for line in reversed(self.output) if line.strip()), None)
        said = f"; its last line: {last.strip()[:200]}" if last else "; it printed nothing"
        return (f"its log: {self.log}" if self.log is not None else "no log") + said

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.uds:
            shutil.rmtree(Path(self.uds).parent, ignore_errors=True)


def start(
    python: str,
    app: str,
    *,
    app_dir: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120.0,
    log: Path | None = None,
    progress: Callable[[str], None] | None = None,
    private: bool = False,
) -> OpenEnvProcess:
    """Serve ``app`` (``module:attribute``) with uvicorn in ``python``'s environment; wait until it answers.

    ``private``: on a unix socket in a new 0700 folder (reached with ``OpenEnvProcess.client`` or
    ``wire.Episode.open(..., uds=...)``), else on loopback TCP. Its output goes to ``log`` (default: a new file
    under ``log_folder()``); ``progress`` hears how the wait goes."""
    if not Path(python).is_file():
        raise LaunchError(f"the environment's interpreter {python} is missing: reinstall it (ngym install openenv:...)")
    if private:
        return _start_private(python, app, app_dir, env, timeout, log, progress)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    command = _command(python, app, app_dir, ["--fd", str(sock.fileno())])
    try:
        process = subprocess.Popen(command, pass_fds=(sock.fileno(),), **_popen_options(app_dir, env))
    finally:
        sock.close()  # the child holds its own copy
    log = log or log_folder() / f"{_slug(app)}-{port}.log"
    return _watch(OpenEnvProcess(process, f"http://127.0.0.1:{port}", log=log), timeout, progress)


def _start_private(
    python: str,
    app: str,
    app_dir: str | None,
    env: dict[str, str] | None,
    timeout: float,
    log: Path | None,
    progress: Callable[[str], None] | None,
) -> OpenEnvProcess:
    """On ``<new 0700 folder>/openenv.sock``: uvicorn makes the socket world-writable, the folder keeps others out."""
    folder = Path(tempfile.mkdtemp(prefix="ngym-openenv-"))  # mkdtemp: mode 0700, a fresh unguessable name
    uds = str(folder / "openenv.sock")
    try:
        process = subprocess.Popen(_command(python, app, app_dir, ["--uds", uds]), **_popen_options(app_dir, env))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    log = log or log_folder() / f"{_slug(app)}-{folder.name}.log"
    return _watch(OpenEnvProcess(process, "http://localhost", log=log, uds=uds), timeout, progress)


def _slug(app: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", app)


def _command(python: str, app: str, app_dir: str | None, listen: list[str]) -> list[str]:
    command = [python, "-m", "uvicorn", app, *listen, "--log-level", "warning", "--ws", "auto"]
    if app_dir:
        command += ["--app-dir", app_dir]
    return command


def _popen_options(app_dir: str | None, env: dict[str, str] | None) -> dict[str, Any]:
    child_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    child_env.pop("VIRTUAL_ENV", None)  # ngym's; the environment's interpreter finds its own site-packages
    return {
        "cwd": app_dir or None,
        "env": child_env,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
        "text": True,
    }


def _watch(running: OpenEnvProcess, timeout: float, progress: Callable[[str], None] | None) -> OpenEnvProcess:
    """Drain its output into its log and wait until it answers (a LaunchError, and it is stopped, if it never does)."""
    assert running.log is not None
    running.log.parent.mkdir(parents=True, exist_ok=True)
    sink = running.log.open("w", encoding="utf-8")
    process = running.process
    Thread(target=_drain, args=(process, running.output, sink), daemon=True).start()
    _wait_ready(running, timeout, progress)
    return running


def _drain(process: subprocess.Popen[str], tail: deque[str], sink: IO[str] | None = None) -> None:
    """Keep the server's last lines (for errors), write them all to its log, never let its pipe fill up."""
    assert process.stdout is not None
    try:
        for line in process.stdout:
            tail.append(line.rstrip())
            if sink is not None:
                sink.write(line)
                sink.flush()
    finally:
        if sink is not None:
            sink.close()


def _wait_ready(running: OpenEnvProcess, timeout: float, progress: Callable[[str], None] | None = None) -> None:
    """Until ``GET /schema`` answers (every OpenEnv app has it); a dead process or the timeout is a LaunchError."""
    started = time.monotonic()
    deadline = started + timeout
    next_report = started + PROGRESS_EVERY_S
    while True:
        if running.process.poll() is not None:
            time.sleep(0.2)  # let _drain read the last lines
            tail = "\n  ".join(list(running.output)[-15:]) or "(no output)"
            running.stop()  # removes its socket's folder
            raise LaunchError(
                f"the OpenEnv server exited with code {running.process.returncode} (its log: {running.log}):\n  {tail}"
            )
        try:
            with running.client() as http:
                if http.get(f"{running.url}/schema").status_code < 500:
                    return
        except httpx.HTTPError:
            pass
        now = time.monotonic()
        if now > deadline:
            running.stop()
            raise LaunchError(f"the OpenEnv server did not answer /schema within {timeout:g} s ({running.where()})")
        if progress is not None and now >= next_report:
            progress(
                f"ngym: … {now - started:.0f} s waiting for the OpenEnv server to answer /schema ({running.where()})"
            )
            next_report = now + PROGRESS_EVERY_S
        time.sleep(0.2)
