"""A server as a child process: start it, wait until it answers, stop it and every process it started, read
the end of its log. Every process ngym starts and supervises goes through these: the fleet's engines
(``ngym.fleet``), ``ngym rollout``/``profile``'s environment (``ngym.child_server``), the session-affine workers
and their HAProxy (``ngym.server.hosting.affinity``); ``ngym containerize --run`` waits for its container with
:func:`poll`.

Each server starts in a session of its own (its pid is its process group), so stopping it reaches its uvicorn
workers and sandboxes too, and it outlives a parent that exits (a fleet outlives its ``ngym up``). A process is
known by its pid *and* its kernel start time (:func:`start_time`), so a pid reused since is never signalled.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from ngym.errors import NgymError

T = TypeVar("T")

#: ``spawn(..., log=INHERIT)``: the child writes to this process's stdout and stderr.
INHERIT: Literal["inherit"] = "inherit"


class StartError(NgymError):
    """A server started as a child process exited, or did not answer in time."""


def spawn(
    command: Sequence[str],
    log: Path | Literal["inherit"] | None,
    *,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    new_session: bool = True,
    preexec_fn: Callable[[], Any] | None = None,
    append: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output in ``log`` (appended, or written afresh unless ``append``; discarded
    without one; this process's own with ``INHERIT``), no stdin, in a session of its own unless ``new_session`` is
    False; ``env`` replaces the environment when given."""
    if log is None or log == INHERIT:
        quiet = log is None
        return subprocess.Popen(
            list(command), stdout=subprocess.DEVNULL if quiet else None, stderr=subprocess.STDOUT if quiet else None,
            stdin=subprocess.DEVNULL, cwd=cwd, env=env, pass_fds=tuple(pass_fds), start_new_session=new_session,
            preexec_fn=preexec_fn,
        )  # fmt: skip
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab" if append else "wb") as written:
        return subprocess.Popen(
            list(command), stdout=written, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
            pass_fds=tuple(pass_fds), start_new_session=new_session, preexec_fn=preexec_fn,
        )  # fmt: skip


def start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` (clock ticks since boot), or "" when there is no such live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: split after its closing one
    fields = stat.rpartition(")")[2].split()
    return "" if fields[0] in ("Z", "X") else fields[19]  # a zombie has exited: only its parent has not reaped it


def stop_group(pid: int, started: str = "", timeout: float = 10.0) -> bool:
    """SIGTERM the process group ``pid`` leads, SIGKILL it after ``timeout`` s, and wait until the group is gone;
    with ``started`` (its :func:`start_time`), only if ``pid`` is still that process. True if it was running."""
    if start_time(pid) == "" or (started and start_time(pid) != started):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if start_time(pid) == "" and not _group_alive(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0  # SIGKILL cannot be refused: gone as soon as the kernel is done with it
    while _group_alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.05)
    return True


def stop(process: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """Stop a child started by :func:`spawn` (its whole group when it leads one), SIGKILL after ``grace``."""
    stop_all([process], grace)


def terminate(processes: Sequence[subprocess.Popen[Any]]) -> None:
    """SIGTERM each child still running (its whole group when it leads one), without waiting: for a signal
    handler, whose caller waits."""
    for process in processes:
        if process.poll() is None:
            _signal(process, signal.SIGTERM)


def stop_all(processes: Sequence[subprocess.Popen[Any]], grace: float = 15.0) -> None:
    """Stop several children at once: SIGTERM to each (its whole group when it leads one), then SIGKILL to those
    still running ``grace`` seconds later (one deadline for all), and wait for each."""
    running = [process for process in processes if process.poll() is None]
    terminate(running)
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(process, signal.SIGKILL)
            process.wait(timeout=grace)


#: Probes go straight to ngym's own servers: never through a proxy ``http_proxy`` names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection over a unix socket (a session-affine worker's, ``ngym.server.hosting.affinity``)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _get_unix(path: str, url: str, timeout: float, headers: dict[str, str]) -> tuple[int, bytes]:
    connection = _UnixConnection(path, timeout)
    try:
        parts = urllib.parse.urlsplit(url)
        connection.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), headers=headers)
        response = connection.getresponse()
        return int(response.status), response.read()
    finally:
        connection.close()


def probe(
    url: str, timeout: float = 2.0, headers: dict[str, str] | None = None, *, unix_socket: str | None = None
) -> tuple[int | None, dict[str, Any] | None]:
    """``GET url`` (with ``headers``; through the unix socket ``unix_socket`` when given, the URL then naming only
    the path): (its HTTP status, or None when nothing answers; its body as a JSON object, ``{}`` for another JSON
    value, None when it is not JSON or the answer is not 2xx)."""
    try:
        if unix_socket is not None:
            status, raw = _get_unix(unix_socket, url, timeout, headers or {})
            if not 200 <= status < 300:
                return status, None
        else:
            request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - ngym's own servers
            with _DIRECT.open(request, timeout=timeout) as response:
                status, raw = int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), None
    except (OSError, ValueError, http.client.HTTPException):
        return None, None
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return status, None
    return status, data if isinstance(data, dict) else {}


def status_of(url: str, timeout: float = 2.0, *, unix_socket: str | None = None) -> int | None:
    """The HTTP status ``GET url`` answers (through ``unix_socket`` when given), or None when nothing answers."""
    return probe(url, timeout, unix_socket=unix_socket)[0]


def fetch_json(url: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """``GET url`` as a JSON object (``{}`` for another JSON value), or None when it does not answer 2xx JSON."""
    status, body = probe(url, timeout)
    return body if status is not None and 200 <= status < 300 else None


def poll(
    check: Callable[[], T | None],
    timeout: float,
    *,
    interval: float = 0.05,
    progress: Callable[[float], None] | None = None,
    every: float = 15.0,
    abandon: Callable[[], bool] | None = None,
) -> T | None:
    """Call ``check()`` every ``interval`` seconds until it returns something other than None (returned), or
    ``timeout`` seconds pass or ``abandon()`` turns true (None). ``check`` raises to give up at once (the process
    it waits for exited). ``progress(seconds waited)`` is called every ``every`` seconds while it waits."""
    started = time.monotonic()
    deadline, next_report = started + timeout, started + every
    while time.monotonic() < deadline and not (abandon is not None and abandon()):
        found = check()
        if found is not None:
            return found
        now = time.monotonic()
        if progress is not None and now >= next_report:
            progress(now - started)
            next_report = now + every
        time.sleep(interval)
    return None


def wait_healthy(
    url: str,
    process: subprocess.Popen[Any] | None,
    timeout: float,
    log: Path | None = None,
    *,
    interval: float = 0.05,
    error: type[NgymError] = StartError,
    what: str = "the server",
    progress: Callable[[str], None] | None = None,
    every: float = 15.0,
    abandon: Callable[[], bool] | None = None,
    unix_socket: str | None = None,
) -> bool:
    """Poll ``GET url`` (through ``unix_socket`` when given) until it answers 2xx (True); ``error`` with the log's
    tail if ``process`` exits first or ``timeout`` seconds pass. ``progress`` is told every ``every`` seconds how
    long it has waited, for what, and the log's path and last line. False when ``abandon()`` turned true first (a
    supervisor asked to stop)."""

    def answered() -> bool | None:
        status = status_of(url, timeout=1.0, unix_socket=unix_socket)
        if status is not None and status < 300:
            return True
        if process is not None and process.poll() is not None:
            raise error(f"{what} exited with code {process.returncode}{log_tail(log)}")
        return None

    def report(waited: float) -> None:
        assert progress is not None
        tail = log_tail(log, 1)
        where = (f"; its log: {log}" if log is not None else "") + (f"; its last line{tail}" if tail else "")
        progress(f"ngym: … {waited:.0f} s waiting for {what} to answer {url}{where}")

    found = poll(
        answered, timeout, interval=interval, progress=report if progress else None, every=every, abandon=abandon
    )
    if found:
        return True
    if abandon is not None and abandon():
        return False
    raise error(f"{what} did not answer {url} within {timeout:.0f}s{log_tail(log)}")


def log_tail(log: Path | None, lines: int = 8) -> str:
    """``": a | b | c"``: the last non-blank lines of a server's log (empty when there is none)."""
    if log is None or not log.is_file():
        return ""
    text = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-lines:]
    return (": " + " | ".join(text)) if text else ""


def log_line(log: str | Path) -> str:
    """The last meaningful line of a log (its last line naming an error when there is one), with its path."""
    try:
        lines = [ln.strip() for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or ["(empty log)"])[-1][:300] + f" (log: {log})"


def _signal(process: subprocess.Popen[Any], sig: int) -> None:
    """Signal the process's group when it leads one, else the process."""
    try:
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status when it is our child: a zombie would keep its group alive."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
