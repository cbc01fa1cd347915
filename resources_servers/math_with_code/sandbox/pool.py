"""The server-side pool: starts the forkserver, hands out one sandboxed worker per session, enforces the wall-clock
limit, replaces dead or timed-out workers, caps the number of concurrent workers, and reaps everything.

    pool = WorkerPool(SandboxLimits(), max_workers=64)
    await pool.start()
    session = await pool.open_session()        # PoolExhausted when all max_workers slots are taken
    result = await session.execute("x = 1\\nx + 1")   # ExecutionResult(success=True, result="2", ...)
    await session.close()                      # kills every process of the session, removes its directory
    await pool.shutdown()
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import fcntl
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .limits import Enforcement, SandboxLimits, missing_isolation
from .protocol import (
    ConnectionClosed,
    ProtocolError,
    checked_reply,
    read_frame,
    recv_frame,
    reply_bound,
    send_frame,
    write_frame,
)

DEFAULT_PRELOAD = (
    "numpy",
    "scipy",
    "scipy.optimize",
    "scipy.integrate",
    "scipy.special",
    "scipy.linalg",
    "scipy.stats",
    "pandas",
    "sympy",
    "fractions",
    "itertools",
    "math",
    "statistics",
    "decimal",
)
DEFAULT_UID_BASE = 1_500_000_000
_POOL_IDS = itertools.count()
STATE_LOST = (
    "the Python process was killed and replaced by a fresh one, so every variable, import and function "
    "your earlier calls defined is lost"
)


def _claim_uid_range(base: int, size: int) -> Any:
    """Claim [base, base+size) for this pool with an flock'ed file, moving up by 65536 while it is taken, so two
    servers on one host never share worker uids (a worker kills every process of its uid)."""
    # One lock folder per user: root's is 0700, and a server of another user (which cannot switch uids anyway) must
    # still get as far as saying what its sandbox lacks.
    euid = os.geteuid()
    lock_dir = Path(tempfile.gettempdir()) / ("ngym-math-with-code-uids" + (f"-{euid}" if euid else ""))
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    stride = max(65536, size)
    for k in range(1024):
        candidate = base + k * stride
        handle = open(lock_dir / f"{candidate}.lock", "a+")  # noqa: SIM115 - held for the pool's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            handle.close()
    raise SandboxError("no free worker uid range")


#: The only variables of the server's environment the forkserver (and so every worker, a fork of it) gets: no
#: session secret, store URL, API key or token can reach user code through os.environ or /proc/self/environ.
ENVIRONMENT_KEPT = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The forkserver's environment: ENVIRONMENT_KEPT and the locale (LC_*) of `environ`, nothing else."""
    return {k: v for k, v in environ.items() if k in ENVIRONMENT_KEPT or k.startswith("LC_")}


class PoolExhausted(Exception):
    """Every worker slot is in use; retry after `retry_after` seconds."""

    def __init__(self, max_workers: int, retry_after: int = 5) -> None:
        super().__init__(f"all {max_workers} Python workers are in use; retry in {retry_after} s")
        self.retry_after = retry_after


class SandboxError(Exception):
    """The forkserver could not be started or did not answer."""


class WeakSandboxError(SandboxError):
    """The machine does not allow the isolation untrusted code needs (and `allow_weak_sandbox` is not set)."""


@dataclass
class ExecutionResult:
    success: bool
    stdout: str = ""
    stderr: str = ""
    result: str | None = None
    error_message: str | None = None
    state_lost: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Worker:
    pid: int
    pidfd: int
    uid: int
    workdir: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        self.writer.close()
        with contextlib.suppress(OSError):
            os.close(self.pidfd)
        self.pidfd = -1


class SandboxSession:
    """One session's sandbox: a pool slot and the worker currently serving it (replaced when it dies)."""

    def __init__(self, pool: WorkerPool, slot: int) -> None:
        self.pool = pool
        self.slot = slot
        self.worker: _Worker | None = None
        self.closed = False
        self.calls = 0
        self.restarts = 0
        self._dirty = False
        self._lock = asyncio.Lock()
        # The supervisor checks and caps each reply; the server still reads no more than a reply can take.
        self._reply_limit = reply_bound(pool.limits.max_output_chars) + 4096

    @property
    def pid(self) -> int | None:
        return self.worker.pid if self.worker else None

    @property
    def workdir(self) -> str | None:
        return self.worker.workdir if self.worker else None

    async def start(self) -> None:
        async with self._lock:
            if self.worker is None and not self.closed:
                self.worker = await self.pool._spawn(self.slot)

    async def execute(self, code: str) -> ExecutionResult:
        """Run `code` in this session's worker; every failure of the sandbox becomes an ExecutionResult."""
        async with self._lock:
            if self.closed:
                return ExecutionResult(False, error_message="this session's Python process was already closed")
            self.calls += 1
            max_code = self.pool.limits.max_code_chars
            if len(code) > max_code:
                return ExecutionResult(
                    False,
                    error_message=f"the code is {len(code)} characters long; the limit is {max_code} characters. "
                    "Nothing was run and the session's state is kept",
                )
            if self._dirty:  # a call was cancelled mid-way: clear the slot before a fresh worker takes it
                self._dirty = False
                with contextlib.suppress(SandboxError, OSError):
                    await self.pool._kill(self.slot, None)
            if self.worker is None:
                try:
                    self.worker = await self.pool._spawn(self.slot)
                except (SandboxError, OSError) as exc:
                    return ExecutionResult(False, error_message=f"could not start a Python process: {exc}")
            worker = self.worker
            limit = self.pool.limits.wall_time_s
            seq = self.calls
            try:
                await write_frame(worker.writer, {"op": "exec", "code": code, "seq": seq})
                frame = await asyncio.wait_for(read_frame(worker.reader, self._reply_limit), timeout=limit)
                died = frame.get("died")
                reply = {**checked_reply(frame, self.pool.limits.max_output_chars), "died": died}
                if died is not None and not isinstance(died, str):
                    raise ProtocolError("`died` is not a string")
                if frame.get("seq") != seq:
                    raise ProtocolError(f"the answer to call {frame.get('seq')!r} came for call {seq}")
            except asyncio.CancelledError:
                # The caller went away mid-call. The worker may still be running this code and would answer the
                # next call with this call's reply, so it is killed; the next call starts a fresh one.
                worker.kill()
                self.worker, self._dirty = None, True
                raise
            except TimeoutError:
                await self._replace()
                return ExecutionResult(
                    False,
                    error_message=f"TimeoutError: execution exceeded the wall-clock limit of {limit:g} s; {STATE_LOST}",
                    state_lost=True,
                )
            except (ProtocolError, OSError) as exc:
                status = await self.pool._status(worker.pid)
                await self._replace()
                if isinstance(exc, ProtocolError) and not isinstance(exc, ConnectionClosed):
                    malformed = f"the sandbox's answer was malformed ({exc}); {STATE_LOST}"
                    return ExecutionResult(False, error_message=malformed, state_lost=True)
                return ExecutionResult(False, error_message=self._died(status), state_lost=True)
            if reply["died"] is not None:
                await self._replace()
                return ExecutionResult(False, error_message=self._died(reply["died"]), state_lost=True)
            result = ExecutionResult(
                success=bool(reply.get("success")),
                stdout=reply.get("stdout") or "",
                stderr=reply.get("stderr") or "",
                result=reply.get("result"),
                error_message=reply.get("error_message"),
            )
            if reply.get("retire"):
                await self._replace()
                result.state_lost = True
            return result

    def _died(self, status: str | None) -> str:
        """What the model is told when its process ended during a call: an exit it made itself (``os._exit``,
        ``sys.exit`` in a thread) is named as such; only a signal is put down to a resource limit."""
        if status is not None and status.startswith("exit code"):
            return f"the Python process exited ({status}) during this call; {STATE_LOST}"
        limits = self.pool.limits
        how = f" ({status})" if status else ""
        return (
            f"the Python process died{how}, most likely on a resource limit (memory {limits.memory_mb} MB, "
            f"CPU {limits.cpu_time_s} s); {STATE_LOST}"
        )

    async def _replace(self) -> None:
        """Kill the current worker and everything it started, then start a fresh one (lazily if that fails)."""
        self.restarts += 1
        await self.pool._kill(self.slot, self.worker)
        self.worker = None
        try:
            self.worker = await self.pool._spawn(self.slot)
        except (SandboxError, OSError):
            self.worker = None

    async def close(self) -> None:
        """Kill every process of the session, remove its working directory, free its slot. Idempotent."""
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            try:
                await self.pool._kill(self.slot, self.worker)
            finally:
                self.worker = None
                self.pool._release(self)


class WorkerPool:
    """A forkserver plus up to `max_workers` live sandboxed workers, one per open session."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        max_workers: int = 64,
        uid_base: int = DEFAULT_UID_BASE,
        work_root: str | None = None,
        preload: tuple[str, ...] | list[str] = DEFAULT_PRELOAD,
        retry_after_s: int = 5,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.max_workers = max_workers
        self._uid_lock = _claim_uid_range(uid_base, max_workers)
        self.uid_base = int(self._uid_lock.name.rsplit("/", 1)[-1].split(".")[0])
        # One work root per pool (two pools of one process must not share it: each removes its own at shutdown).
        default_root = f"ngym-math-with-code-{os.getpid()}-{next(_POOL_IDS)}"
        self.work_root = work_root or os.path.join(tempfile.gettempdir(), default_root)
        self.preload = list(preload)
        self.retry_after_s = retry_after_s
        self.enforcement: dict[str, Any] = {}
        self.sessions: set[SandboxSession] = set()
        self._free: collections.deque[int] = collections.deque(range(max_workers))
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: socket.socket | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ngym-zygote")
        self._start_lock = asyncio.Lock()

    # ---- public --------------------------------------------------------------------------------------------
    @property
    def zygote_pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def active(self) -> int:
        return self.max_workers - len(self._free)

    async def start(self) -> None:
        async with self._start_lock:
            if self._proc is None or self._proc.poll() is not None:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._start_zygote)

    async def open_session(self, start: bool = True) -> SandboxSession:
        """Reserve a slot (PoolExhausted when none is free) and, with `start`, fork its worker now."""
        if not self._free:
            raise PoolExhausted(self.max_workers, self.retry_after_s)
        session = SandboxSession(self, self._free.popleft())
        self.sessions.add(session)
        if start:
            try:
                await session.start()
            except BaseException:
                await session.close()
                raise
        return session

    async def shutdown(self) -> None:
        """Close every session, stop the forkserver (which kills whatever is left), remove the work root."""
        for session in list(self.sessions):
            with contextlib.suppress(Exception):  # keep closing the others
                await session.close()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._stop_zygote)
        self._executor.shutdown(wait=False)
        self._uid_lock.close()

    def missing_isolation(self) -> list[str]:
        """What the machine did not allow of the isolation untrusted code needs (empty: all of it holds)."""
        return missing_isolation(Enforcement(**self.enforcement), self.limits) if self.enforcement else []

    def stats(self) -> dict[str, Any]:
        return {"active_workers": self.active, "max_workers": self.max_workers, "zygote_pid": self.zygote_pid}

    # ---- forkserver ----------------------------------------------------------------------------------------
    def _start_zygote(self) -> None:
        self._stop_zygote()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        config = {
            "limits": asdict(self.limits),
            "uid_base": self.uid_base,
            "max_slots": self.max_workers,
            "work_root": self.work_root,
            "preload": self.preload,
            "parent_pid": os.getpid(),
        }
        package_root = str(Path(__file__).resolve().parents[2])
        bootstrap = (
            f"import sys; sys.path.insert(0, {package_root!r}); from math_with_code.sandbox.zygote import main; main()"
        )
        env = worker_environment(os.environ)
        for var in (
            "OPENBLAS_NUM_THREADS",
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "NUMEXPR_NUM_THREADS",
            "VECLIB_MAXIMUM_THREADS",
        ):
            env[var] = "1"  # no BLAS thread pools: they do not survive fork, and they would count as processes
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", bootstrap, str(child.fileno()), json.dumps(config)],
                pass_fds=[child.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        finally:
            child.close()
        parent.settimeout(120)
        try:
            ready, _ = recv_frame(parent)
        except (ProtocolError, OSError) as exc:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
            raise SandboxError(f"the Python forkserver did not start: {exc}") from exc
        if not ready.get("ready"):
            parent.close()
            self._proc.wait()
            self._proc = None
            raise SandboxError(f"the Python forkserver did not start: {ready.get('error')}")
        parent.settimeout(60)
        self._ctl = parent
        self.enforcement = ready.get("enforcement", {})

    def _stop_zygote(self) -> None:
        proc, ctl = self._proc, self._ctl
        self._proc, self._ctl = None, None
        if ctl is not None:
            try:
                send_frame(ctl, {"op": "exit"})
                recv_frame(ctl)
            except (ProtocolError, OSError):
                pass
            ctl.close()
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _call_sync(self, message: dict[str, Any], fds: list[int] | None = None) -> tuple[dict[str, Any], list[int]]:
        for attempt in range(2):
            if self._ctl is None or self._proc is None or self._proc.poll() is not None:
                self._start_zygote()
            assert self._ctl is not None
            try:
                send_frame(self._ctl, message, fds=fds)
                return recv_frame(self._ctl, max_fds=1)
            except (ProtocolError, OSError) as exc:
                if attempt:
                    raise SandboxError(f"the Python forkserver failed: {exc}") from exc
                if self._proc is not None:
                    self._proc.kill()
                    self._proc.wait()
                self._ctl = None
        raise AssertionError("unreachable")

    async def _call(self, message: dict[str, Any], fds: list[int] | None = None) -> tuple[dict[str, Any], list[int]]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call_sync, message, fds)

    # ---- workers -------------------------------------------------------------------------------------------
    async def _spawn(self, slot: int) -> _Worker:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            reply, fds = await self._call({"op": "spawn", "slot": slot}, fds=[child.fileno()])
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        if "error" in reply or not fds:
            parent.close()
            for fd in fds:
                os.close(fd)
            raise SandboxError(reply.get("error", "no pidfd from the forkserver"))
        parent.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=parent)
        worker = _Worker(reply["pid"], fds[0], reply["uid"], reply["workdir"], reader, writer)
        try:
            ready = await asyncio.wait_for(read_frame(reader), timeout=30)
            if not ready.get("ready"):
                raise SandboxError(f"worker did not start: {ready}")
        except (TimeoutError, ProtocolError, OSError) as exc:
            status = await self._status(worker.pid)
            await self._kill(slot, worker)
            raise SandboxError(f"the Python worker did not start ({status or exc})") from exc
        return worker

    async def _kill(self, slot: int, worker: _Worker | None) -> None:
        if worker is not None:
            worker.kill()
        if self._ctl is None:
            return
        reply, _ = await self._call({"op": "kill", "slot": slot})
        if reply.get("remaining"):
            raise SandboxError(f"processes of slot {slot} survived SIGKILL")

    async def _status(self, pid: int) -> str | None:
        try:
            reply, _ = await self._call({"op": "status", "pid": pid})
        except (SandboxError, OSError):
            return None
        return reply.get("status")

    def _release(self, session: SandboxSession) -> None:
        if session in self.sessions:
            self.sessions.discard(session)
            self._free.append(session.slot)
