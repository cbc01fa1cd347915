"""The worker: one process per session that runs the session's code in one persistent namespace.

`become_worker` is called in a child the forkserver just forked (still root). It applies the limits (limits.py),
then serves exec requests from its socket until the socket closes. Each request runs one "cell": the code is
executed in the session's globals; if its last statement is an expression, `str()` of its value is the `result`
(like NeMo Gym's execute_python). stdout/stderr are captured in memory with a cap (the rest is counted and dropped
behind a marker), so printing 100 MB costs no more than the cap.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import errno
import io
import linecache
import os
import select
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

from .limits import PR_SET_PDEATHSIG, Enforcement, SandboxLimits, drop_privileges, enter_namespaces, prctl, set_rlimits
from .protocol import ProtocolError, recv_frame, send_frame

_THIS_FILE = __file__


class CpuTimeLimitExceeded(BaseException):
    """Raised in user code by SIGXCPU; a BaseException so `except Exception` in user code does not swallow it."""


class NetworkDisabledError(PermissionError):
    pass


class CappedText(io.TextIOBase):
    """A text stream that keeps the first `limit` characters and counts the rest."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.dropped = 0

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        room = self.limit - self.kept
        if room > 0:
            piece = s[:room]
            self.parts.append(piece)
            self.kept += len(piece)
            self.dropped += len(s) - len(piece)
        else:
            self.dropped += len(s)
        return len(s)

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def getvalue(self) -> str:
        return truncate_marker("".join(self.parts), self.dropped, self.limit)


def truncate_marker(text: str, dropped: int, limit: int) -> str:
    if not dropped:
        return text
    return text + f"\n[... output truncated: {dropped} more characters not shown (limit {limit} characters) ...]"


def cap(text: str, limit: int) -> str:
    return truncate_marker(text[:limit], max(0, len(text) - limit), limit)


def limit_hint(exc: BaseException, limits: SandboxLimits, workdir: str) -> str | None:
    """A sentence naming the sandbox limit behind a known exception, appended to error_message."""
    if isinstance(exc, MemoryError):
        return f"memory limit reached: each process may use at most {limits.memory_mb} MB of address space"
    if isinstance(exc, CpuTimeLimitExceeded):
        return f"CPU time limit reached: the process may use at most {limits.cpu_time_s} CPU seconds"
    if isinstance(exc, NetworkDisabledError):
        return None
    if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return f"process limit reached: at most {limits.max_processes} processes and threads"
    if isinstance(exc, OSError):
        if exc.errno == errno.EAGAIN:
            return f"process limit reached: at most {limits.max_processes} processes and threads"
        if exc.errno in (errno.EFBIG, errno.ENOSPC, errno.EDQUOT):
            return f"disk limit reached: the working directory holds at most {limits.disk_mb} MB"
        if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM) and exc.filename is not None:
            return f"files can only be written inside the working directory {workdir}"
        if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED) or isinstance(exc, socket.gaierror):
            return "network access is disabled in this sandbox"
        if exc.errno == errno.EMFILE:
            return f"open file limit reached: at most {limits.max_open_files} open files"
    return None


def _user_traceback(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _THIS_FILE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


class Session:
    """The persistent namespace of one worker and the code that runs a cell in it."""

    def __init__(self, limits: SandboxLimits, workdir: str) -> None:
        self.limits = limits
        self.workdir = workdir
        self.cell = 0
        self.retire = False
        self.globals: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
        for alias, module in (
            ("np", "numpy"),
            ("numpy", "numpy"),
            ("scipy", "scipy"),
            ("pd", "pandas"),
            ("pandas", "pandas"),
            ("math", "math"),
        ):
            if module in sys.modules:
                self.globals[alias] = sys.modules[module]

    def run(self, code: str) -> dict[str, Any]:
        self.cell += 1
        filename = f"<cell {self.cell}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        out, err = CappedText(self.limits.max_output_chars), CappedText(self.limits.max_output_chars)
        saved = sys.stdout, sys.stderr
        result: str | None = None
        error: str | None = None
        sys.stdout, sys.stderr = out, err
        try:
            tree = ast.parse(code, filename, "exec")
            last: ast.Expression | None = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, filename, "exec"), self.globals)
            if last is not None:
                value = eval(compile(last, filename, "eval"), self.globals)
                if value is not None:
                    result = cap(str(value), self.limits.max_output_chars)
        except BaseException as exc:  # noqa: BLE001 - user code may raise anything, SystemExit included
            if isinstance(exc, CpuTimeLimitExceeded):
                self.retire = True
            with contextlib.suppress(BaseException):
                err.write(_user_traceback(exc))
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            hint = limit_hint(exc, self.limits, self.workdir)
            if hint:
                error += f" ({hint})"
            if self.retire:
                error += "; the Python process is restarted after this call and all variables are lost"
        finally:
            sys.stdout, sys.stderr = saved
        reply: dict[str, Any] = {
            "success": error is None,
            "stdout": out.getvalue(),
            "stderr": err.getvalue(),
            "result": result,
            "error_message": cap(error, 4096) if error else None,
        }
        if self.retire:
            reply["retire"] = True
        return reply


def _install_network_guard() -> None:
    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.__new__" and args[1] not in (socket.AF_UNIX,):
            raise NetworkDisabledError("network access is disabled in this sandbox (socket creation refused)")
        if event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
            raise NetworkDisabledError("network access is disabled in this sandbox (name lookup refused)")

    sys.addaudithook(hook)


def _on_sigxcpu(signum: int, frame: Any) -> None:
    raise CpuTimeLimitExceeded("CPU time limit exceeded")


def _kill_other_processes(enforcement: Enforcement) -> None:
    """Kill every process of this worker's uid but itself (the pool slot's uid belongs to this worker alone)."""
    if enforcement.unprivileged_uid and os.getuid() != 0:
        for _ in range(2):
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                break
    else:  # no private uid: kill our own children's process trees instead
        for child in _children(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
    while True:
        try:
            pid, _ = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == 0:
            break


def _reap_nohang() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found.append(int(child))
                found.extend(_children(int(child)))
    except OSError:
        pass
    return found


def _close_fds(keep: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.closerange(3, keep)
    os.closerange(keep + 1, 65536)


def become_worker(
    conn_fd: int,
    slot: int,
    uid: int,
    workdir: str,
    limits: SandboxLimits,
    enforcement: Enforcement,
    cgroups: Any,
    forkserver_pidfd: int,
) -> None:
    """Turn the just-forked child into a sandboxed worker and serve until the socket closes. Never returns."""
    code = 0
    try:
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        if cgroups is not None:
            cgroups.join(slot)
        enter_namespaces(enforcement, limits, workdir, uid)
        os.chdir(workdir)
        set_rlimits(limits, nproc=enforcement.unprivileged_uid)
        if enforcement.unprivileged_uid:
            drop_privileges(uid)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([forkserver_pidfd], [], [], 0)[0]:  # readable: the forkserver died before the prctl
            os._exit(1)
        _close_fds(conn_fd)
        os.environ.update({"HOME": workdir, "TMPDIR": workdir, "PWD": workdir})
        import tempfile

        tempfile.tempdir = workdir
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        conn = socket.socket(fileno=conn_fd)
        if not limits.allow_network:
            _install_network_guard()
        signal.signal(signal.SIGXCPU, _on_sigxcpu)
        serve(conn, Session(limits, workdir), enforcement, limits)
    except BaseException:  # noqa: BLE001 - a child must never return into the forkserver's loop
        code = 70
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(code)


def serve(conn: socket.socket, session: Session, enforcement: Enforcement, limits: SandboxLimits) -> None:
    send_frame(conn, {"ready": True, "pid": os.getpid()})
    while True:
        try:
            message, _ = recv_frame(conn)
        except (ProtocolError, OSError):
            return
        op = message.get("op")
        if op == "exec":
            reply = session.run(str(message.get("code", "")))
        elif op == "ping":
            reply = {"ok": True}
        else:
            reply = {"success": False, "error_message": f"unknown op {op!r}"}
        if limits.kill_background_processes:
            _kill_other_processes(enforcement)
        else:
            _reap_nohang()
        try:
            send_frame(conn, reply)
        except OSError:
            return
        if reply.get("retire"):
            return
