"""Serve an environment as a child process on 127.0.0.1 and wait until it answers; stop it after.

``ngym rollout NAME`` and ``ngym profile NAME`` start the environment they drive this way, and so do the
integration tests and the benchmarks::

    with serve_environment("example_single_tool_call", workers=2) as url:
        ...                                   # url = http://127.0.0.1:<free port>, /health answered

The server runs ``python -m ngym.cli run TARGET --host 127.0.0.1 --port P --workers N [key=value ...]`` in its
own session (so stopping it reaches its uvicorn workers too), its output goes to a log file, and a server that
exits or does not answer in time raises ``EnvironmentStartError`` quoting the end of that log.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ngym.child_python import python_module
from ngym.errors import NgymError

LOOPBACK = "127.0.0.1"


class EnvironmentStartError(NgymError):
    """An environment started as a child process exited, or did not answer in time."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def fetch_health(url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """``GET <url>/health`` as JSON, or None when the server does not answer (yet)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout) as response:  # noqa: S310
            data = json.loads(response.read() or b"{}")
            return data if isinstance(data, dict) else {}
    except (OSError, urllib.error.URLError, ValueError):
        return None


def _answers(url: str, timeout: float) -> bool:
    """Whether ``GET url`` answers 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):  # noqa: S310 - our own loopback server
            return True
    except (OSError, urllib.error.URLError, ValueError):
        return False


#: how often a server that is not ready yet is reported on (seconds)
PROGRESS_EVERY_S = 15.0


def log_tail(log: Path | None, lines: int = 8) -> str:
    """``": a | b | c"``: the last non-blank lines of a server's log (empty when there is none)."""
    if log is None or not log.is_file():
        return ""
    text = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-lines:]
    return (": " + " | ".join(text)) if text else ""


def wait_healthy(
    url: str,
    process: subprocess.Popen[Any] | None,
    timeout: float,
    log: Path | None = None,
    *,
    path: str = "/health",
    interval: float = 0.05,
    progress: Callable[[str], None] | None = None,
    every: float = PROGRESS_EVERY_S,
) -> None:
    """Poll ``GET <url><path>`` until it answers 2xx; ``EnvironmentStartError`` with the log's tail if
    ``process`` exits first or ``timeout`` seconds pass. ``progress`` is told every ``every`` seconds how long it
    has waited, for what, and the log's path and last line."""
    started = time.monotonic()
    deadline = started + timeout
    next_report = started + every
    while time.monotonic() < deadline:
        if _answers(url.rstrip("/") + path, timeout=1.0):
            return
        if process is not None and process.poll() is not None:
            raise EnvironmentStartError(f"the environment exited with code {process.returncode}{log_tail(log)}")
        now = time.monotonic()
        if progress is not None and now >= next_report:
            tail = log_tail(log, 1)
            where = (f"; its log: {log}" if log is not None else "") + (f"; its last line{tail}" if tail else "")
            progress(f"ngym: … {now - started:.0f} s waiting for the environment to answer {url}{path}{where}")
            next_report = now + every
        time.sleep(interval)
    raise EnvironmentStartError(f"the environment did not answer {url}{path} within {timeout:.0f}s{log_tail(log)}")


def _signal(process: subprocess.Popen[Any], sig: int) -> None:
    """Signal the process's group when it leads one (started with ``start_new_session``), else the process."""
    try:
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
    except ProcessLookupError:
        pass


def stop_process(process: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """SIGTERM the server (its whole process group when it leads one: uvicorn workers), SIGKILL after ``grace``."""
    if process.poll() is not None:
        return
    _signal(process, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _signal(process, signal.SIGKILL)
        process.wait(timeout=grace)


def start_environment(
    target: str,
    *,
    port: int,
    workers: int = 1,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``ngym run TARGET`` (an installed name or a config file) on 127.0.0.1:``port`` in its own session.

    ``env`` is added to this process's environment; output goes to ``log`` (discarded without one).
    The caller waits (``wait_healthy``) and stops it (``stop_process``); ``serve_environment`` does both.
    """
    command = python_module("ngym.cli", "run", target, "--host", LOOPBACK, "--port", str(port))
    command += ["--workers", str(workers), *overrides]
    environ = {**os.environ, **env} if env is not None else None
    if log is None:
        return subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=environ, start_new_session=True
        )
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environ, start_new_session=True)


@contextmanager
def serve_environment(
    target: str,
    *,
    port: int | None = None,
    workers: int = 1,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    log: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """Serve ``target`` with ``ngym run`` (see ``start_environment``); yield its URL once ``/health`` answers.

    ``port`` defaults to a free one; the server's output goes to ``log`` (default: a temporary file). The
    server is stopped when the block ends, however it ends.
    """
    port = port or free_port()
    url = f"http://{LOOPBACK}:{port}"
    with tempfile.TemporaryDirectory(prefix="ngym-serve-") as scratch:
        log = log or Path(scratch, "server.log")
        process = start_environment(target, port=port, workers=workers, overrides=overrides, env=env, log=log)
        try:
            wait_healthy(url, process, timeout, log, progress=progress)
            yield url
        finally:
            stop_process(process)
