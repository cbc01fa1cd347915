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

import os
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ngym import processes
from ngym.child_python import python_module
from ngym.processes import log_tail as log_tail
from ngym.processes import stop as stop_process

LOOPBACK = "127.0.0.1"


class EnvironmentStartError(processes.StartError):
    """An environment started as a child process exited, or did not answer in time."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def fetch_health(url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """``GET <url>/health`` as JSON, or None when the server does not answer (yet)."""
    return processes.fetch_json(url.rstrip("/") + "/health", timeout)


#: how often a server that is not ready yet is reported on (seconds)
PROGRESS_EVERY_S = 15.0


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
    has waited, for what, and the log's path and last line (``ngym.processes.wait_healthy``)."""
    processes.wait_healthy(
        url.rstrip("/") + path, process, timeout, log, interval=interval, error=EnvironmentStartError,
        what="the environment", progress=progress, every=every,
    )  # fmt: skip


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
    return processes.spawn(command, log, env=environ, append=False)


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


__all__ = [
    "LOOPBACK",
    "PROGRESS_EVERY_S",
    "EnvironmentStartError",
    "fetch_health",
    "free_port",
    "log_tail",
    "serve_environment",
    "start_environment",
    "stop_process",
    "wait_healthy",
]
