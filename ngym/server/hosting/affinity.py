"""``ngym run NAME --workers N`` for environments whose sessions stay in the process: N workers behind HAProxy.

uvicorn's own workers share one socket and the kernel hands each connection to any of them, so a rollout's
requests would reach workers that do not hold its session. Environments whose state cannot leave the process
(NeMo Gym's ``self.sessions[...]``, math_with_code's live sandbox, workplace_assistant's databases) and every
environment on the memory store therefore run as N single-worker processes behind HAProxy, which sends every
request of a rollout to the worker its session id names (worker I is routing slot I of N, ``NGYM_ROUTE_SLOT``;
``ngym.server.sessions.routing``, ``ngym.server.hosting.haproxy``). Each worker listens on its own unix socket in
the supervisor's private folder (mode 0700; a loopback TCP port where such a path cannot be used): the hop from
HAProxy costs both sides less than loopback TCP, and nothing else on the machine reaches a worker directly.

This process is the supervisor: it binds the public socket (so ``--port 0`` works and the port is known before
anything starts) and each worker's socket, hands the public one to HAProxy and each worker its own as inherited
descriptors, restarts a worker that dies (its sessions are lost: their verifies are masked ``session_lost``), and
on SIGINT/SIGTERM stops them all. Children get SIGTERM if this process dies (``PR_SET_PDEATHSIG``), so none is left
behind.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ngym import processes
from ngym.child_python import python_module
from ngym.server.hosting.client_limits import ClientLimits
from ngym.server.hosting.haproxy import (
    Backend,
    batch_scheduling,
    haproxy_batch,
    haproxy_binary,
    haproxy_command,
    haproxy_config,
    haproxy_nice,
    lower_priority,
)
from ngym.server.pipeline.app import SPEC_ENV, ServeSpec
from ngym.server.sessions.routing import ROUTE_SLOT_ENV, RouteSlot

log = logging.getLogger("ngym.serve")

#: The listening socket a worker serves on, inherited from the supervisor (its descriptor number).
LISTEN_FD_ENV = "NGYM_LISTEN_FD"
#: Set in a worker of a set: its index (its own "serving at" line is left out; the supervisor prints the URL).
WORKER_INDEX_ENV = "NGYM_WORKER_INDEX"
#: A worker that dies this many times within ``RESTART_WINDOW_S`` is not restarted again (reported instead).
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
STOP_GRACE_S = 10.0
READY_TIMEOUT_S = 300.0  # an environment may load models or data at start-up


class WorkerFailed(processes.StartError):
    """A worker could not start: ``ngym run`` reports it in one line."""


#: the folder of one supervisor's HAProxy configuration and sockets: ``<tmp>/ngym-haproxy-<supervisor pid>-<random>``
FOLDER_PREFIX = "ngym-haproxy-"


def sweep_stale_folders(root: Path | None = None) -> list[Path]:
    """Remove this user's HAProxy folders whose supervisor is gone (killed outright, e.g. a fleet unit SIGKILLed
    with its node's actor): nothing else would, and each holds a configuration and dead sockets. A folder whose
    supervisor still runs, or of another user, is kept. Returns the folders removed."""
    removed = []
    for folder in (root or Path(tempfile.gettempdir())).glob(f"{FOLDER_PREFIX}*-*"):
        pid_text = folder.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        try:
            if not pid_text.isdigit() or folder.stat().st_uid != os.getuid() or processes.start_time(int(pid_text)):
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the supervisor dies, however it dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: Ctrl-C still reaches the whole process group
        pass


#: The longest unix socket path every platform binds (``sun_path``: 108 bytes on Linux, 104 on macOS).
_UNIX_PATH_MAX = 100


def _worker_socket(folder: Path, index: int) -> tuple[socket.socket, str | None]:
    """Worker ``index``'s listening socket: a unix socket in ``folder`` (the supervisor's own, mode 0700), else
    (no unix sockets, or a path too long or one HAProxy's configuration cannot quote) a loopback TCP port.

    A unix socket because HAProxy's hop to a worker costs both sides less over it than over loopback TCP (no TCP
    stack and no packet filter per request: ``bench/bench_workers.py``), and no other user of the machine can
    reach a worker around HAProxy's checks on the session cookie. Returns the socket and its path (None: TCP)."""
    path: str | None = str(folder / f"w{index}.sock")
    if hasattr(socket, "AF_UNIX") and path and len(path.encode()) <= _UNIX_PATH_MAX and "'" not in path:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        os.chmod(path, 0o600)  # in a 0700 folder already: only this user, and only by its path
    else:
        path = None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
    sock.listen(1024)  # listening before any worker runs: a connection made during a restart waits, not refused
    sock.set_inheritable(True)
    return sock, path


@dataclass
class _Worker:
    index: int
    sock: socket.socket
    #: the path of its unix socket, None when it listens on a loopback port
    unix_socket: str | None
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    deaths: deque[float] = field(default_factory=deque)
    given_up: bool = False

    @classmethod
    def listening(cls, folder: Path, index: int) -> _Worker:
        sock, unix = _worker_socket(folder, index)
        return cls(index, sock, unix, 0 if unix else int(sock.getsockname()[1]))

    def backend(self) -> Backend:
        """It as HAProxy's ``server w<index>``."""
        name = f"w{self.index}"
        return (
            Backend(name, unix_socket=self.unix_socket) if self.unix_socket else Backend(name, "127.0.0.1", self.port)
        )

    def livez(self) -> tuple[str, str | None]:
        """Its ``/livez`` URL and the unix socket to reach it through (None: over TCP)."""
        if self.unix_socket:
            return "http://localhost/livez", self.unix_socket
        return f"http://127.0.0.1:{self.port}/livez", None


class AffineWorkers:
    """N single-worker ``ngym`` processes and the HAProxy in front of them; ``run()`` supervises until stopped."""

    def __init__(
        self,
        spec: ServeSpec,
        workers: int,
        public: socket.socket,
        *,
        cookie_name: str,
        session_ttl_seconds: float,
        max_sessions: int,
        access_log: bool = False,
        limits: ClientLimits = ClientLimits(),
    ) -> None:
        self.spec = spec
        self.public = public
        self.access_log = access_log
        self.haproxy_bin = haproxy_binary()  # ConfigError with the install hint, before anything starts
        self.haproxy_nice = haproxy_nice()  # ConfigError naming NGYM_HAPROXY_NICE, before anything starts
        self.haproxy_batch = haproxy_batch()  # ConfigError naming NGYM_HAPROXY_BATCH, before anything starts
        sweep_stale_folders()  # what supervisors killed outright left
        # mode 0700 (the workers' sockets are in it), named by this process so a later sweep knows when it is gone
        self._dir = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        self.workers = [_Worker.listening(self._dir, i) for i in range(workers)]
        #: this set's place in an outer one (a Ray replica running --workers): its workers' slots nest inside it
        self.outer_slot = RouteSlot.from_env()
        self.haproxy: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self.config_path = self._dir / "haproxy.cfg"
        #: HAProxy's runtime API (``show stat``: which workers it counts up), mode 0600
        self.stats_socket = self._dir / "haproxy.sock"
        public.set_inheritable(True)
        self.config_path.write_text(
            haproxy_config(
                listen_fd=public.fileno(),
                backends=[w.backend() for w in self.workers],
                cookie_name=cookie_name,
                session_ttl_seconds=session_ttl_seconds,
                max_sessions=max_sessions,
                stats_socket=str(self.stats_socket),
                stride=self.outer_slot.stride,
                limits=limits,
            )
        )

    def _start_worker(self, worker: _Worker) -> None:
        env = {
            **os.environ,
            SPEC_ENV: self.spec.to_json(),  # never on the command line: it may hold session_secret
            LISTEN_FD_ENV: str(worker.sock.fileno()),
            WORKER_INDEX_ENV: str(worker.index),
            # the session ids it makes route back to it
            ROUTE_SLOT_ENV: str(self.outer_slot.inner(worker.index, len(self.workers))),
        }
        cmd = python_module("ngym.server.hosting.host", "1", "1" if self.access_log else "0")
        # its output is the supervisor's (the user's terminal or the fleet's log); it stays in this process group
        worker.process = processes.spawn(
            cmd, processes.INHERIT, env=env, pass_fds=(worker.sock.fileno(),), new_session=False,
            preexec_fn=_die_with_parent,
        )  # fmt: skip

    def _start_haproxy(self) -> None:
        check = subprocess.run(
            [self.haproxy_bin, "-c", "-q", "-f", str(self.config_path)],
            pass_fds=(self.public.fileno(),),
            capture_output=True,
            text=True,
        )
        if check.returncode != 0:
            raise RuntimeError(f"HAProxy refused ngym's configuration: {check.stderr.strip() or check.stdout.strip()}")
        self.haproxy = processes.spawn(
            haproxy_command(self.haproxy_bin, str(self.config_path)), processes.INHERIT,
            pass_fds=(self.public.fileno(),), new_session=False, preexec_fn=self._haproxy_child,
        )  # fmt: skip

    def _haproxy_child(self) -> None:
        """In HAProxy's process before exec: SIGTERM when the supervisor dies; its priority and scheduling class
        (``NGYM_HAPROXY_NICE``, ``NGYM_HAPROXY_BATCH``)."""
        _die_with_parent()
        lower_priority(self.haproxy_nice)
        if self.haproxy_batch:
            batch_scheduling()

    def start(self) -> None:
        """Start the workers, wait until each answers ``/livez``, then start HAProxy in front of them."""
        for worker in self.workers:
            self._start_worker(worker)
        self._wait_ready()
        self._start_haproxy()
        print(f"ngym: {len(self.workers)} workers ready behind HAProxy", flush=True)

    def _wait_ready(self) -> None:
        """Until every worker answers ``/livez`` (they start together: waiting for each in turn takes as long as
        the slowest), or a stop is asked for; ``WorkerFailed`` when one exits or the time is up."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        for worker in self.workers:
            assert worker.process is not None
            url, unix = worker.livez()
            ready = processes.wait_healthy(
                url, worker.process, max(0.0, deadline - time.monotonic()), interval=0.1, error=WorkerFailed,
                what=f"worker {worker.index}", abandon=lambda: self._stopping, unix_socket=unix,
            )  # fmt: skip
            if not ready:
                return

    def request_stop(self, *_: Any) -> None:
        """The SIGINT/SIGTERM handler: the supervision loop stops everything once it sees this."""
        self._stopping = True

    def stop(self) -> None:
        """Stop HAProxy and every worker (SIGTERM; SIGKILL after ``STOP_GRACE_S``)."""
        self._stopping = True
        children = [p for p in (self.haproxy, *(w.process for w in self.workers)) if p is not None]
        processes.stop_all(children, STOP_GRACE_S)

    def _check_workers(self) -> None:
        for worker in self.workers:
            process = worker.process
            if self._stopping or worker.given_up or process is None or process.poll() is None:
                continue
            now = time.monotonic()
            worker.deaths.append(now)
            while worker.deaths and worker.deaths[0] < now - RESTART_WINDOW_S:
                worker.deaths.popleft()
            if len(worker.deaths) > MAX_RESTARTS:
                worker.given_up = True
                worker.sock.close()  # HAProxy's checks now fail at once: the worker is left out for good
                print(
                    f"ngym: error: worker {worker.index} exited {len(worker.deaths)} times within "
                    f"{RESTART_WINDOW_S:.0f} s (last code {process.returncode}); not restarting it, serving with "
                    "the others",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            print(
                f"ngym: worker {worker.index} (pid {process.pid}) exited with code {process.returncode}; restarting "
                "it. The sessions it held are lost: their verifies answer masked session_lost, their tool calls 410",
                file=sys.stderr,
                flush=True,
            )
            self._start_worker(worker)

    def run(self) -> int:
        """Start everything and supervise until SIGINT/SIGTERM (0) or HAProxy / every worker is gone (1)."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        try:
            try:
                self.start()
            except (WorkerFailed, RuntimeError) as exc:
                print(f"ngym: error: {exc}", file=sys.stderr, flush=True)
                return 1
            while not self._stopping:
                time.sleep(0.2)
                if self._stopping:
                    break
                assert self.haproxy is not None
                if self.haproxy.poll() is not None:
                    print(f"ngym: error: HAProxy exited with code {self.haproxy.returncode}", file=sys.stderr)
                    return 1
                self._check_workers()
                if all(w.given_up for w in self.workers):
                    print("ngym: error: every worker failed; stopping", file=sys.stderr)
                    return 1
            return 0
        finally:
            self.stop()
            for worker in self.workers:
                worker.sock.close()
                if worker.unix_socket:
                    Path(worker.unix_socket).unlink(missing_ok=True)
            self.config_path.unlink(missing_ok=True)
            self.stats_socket.unlink(missing_ok=True)
            self._dir.rmdir()


__all__ = ["AffineWorkers", "LISTEN_FD_ENV", "WORKER_INDEX_ENV"]
