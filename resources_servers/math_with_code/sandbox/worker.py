"""The user-code process: one per session, it runs the session's code in one persistent namespace.

It is forked by the session's supervisor (supervisor.py), which holds the channel to the server; this process
never holds it. Each cell the supervisor sends runs in the session's globals; if its last statement is an
expression, `str()` of its value is the `result` (like NeMo Gym's execute_python). stdout/stderr are captured in
memory with a cap (the rest is counted and dropped behind a marker), so printing 100 MB costs no more than the cap.
The reply goes to a pipe that came with the cell; the supervisor reads it with caps and checks it.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import errno
import io
import linecache
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

from .limits import PR_SET_PDEATHSIG, Enforcement, SandboxLimits, prctl
from .protocol import ProtocolError, encode, recv_frame

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
    def encoding(self) -> str:  # type: ignore[override]  # typeshed: a writable attribute; read-only here, as on sys.stdout
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
            tail = tree.body[-1] if tree.body else None
            if isinstance(tail, ast.Expr):  # a trailing expression's value is shown, as a notebook shows it
                tree.body.pop()
                last = ast.Expression(tail.value)
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
    """Kill every process of this worker's uid but itself and its supervisor (the slot's uid is theirs alone)."""
    if enforcement.unprivileged_uid and enforcement.pid_namespace and os.getuid() != 0:
        # kill(-1) spares the caller and the namespace's init, which is the supervisor
        for _ in range(2):
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                break
    else:  # no private uid: kill our own children's process trees instead
        for child in children(os.getpid()):
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


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found.append(int(child))
                found.extend(children(int(child)))
    except OSError:
        pass
    return found


def close_fds(keep: set[int]) -> None:
    """Point 0, 1 and 2 at /dev/null and close every other descriptor but `keep`."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 65536)


def user_main(cmd: socket.socket, workdir: str, limits: SandboxLimits, enforcement: Enforcement) -> None:
    """The user-code process, forked by the supervisor (supervisor.py): set up, then serve cells. Never returns."""
    code = 0
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a reply pipe the supervisor closed is an OSError, not death
        os.environ.update({"HOME": workdir, "TMPDIR": workdir, "PWD": workdir})
        import tempfile

        tempfile.tempdir = workdir
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        if not limits.allow_network:
            _install_network_guard()
        signal.signal(signal.SIGXCPU, _on_sigxcpu)
        serve_user(cmd, Session(limits, workdir), enforcement, limits)
    except BaseException:  # noqa: BLE001 - a forked child must never return into its parent's code
        code = 70
    finally:
        os._exit(code)


def serve_user(cmd: socket.socket, session: Session, enforcement: Enforcement, limits: SandboxLimits) -> None:
    """Run each cell the supervisor sends; write its reply to the pipe that came with it, then close that pipe.

    The supervisor never reads this socket and reads each call's reply from that call's own pipe (with caps), so
    whatever the code writes to any descriptor it finds can only make that one call's reply malformed."""
    while True:
        try:
            message, fds = recv_frame(cmd, max_fds=1)
        except (ProtocolError, OSError, ValueError):
            return
        if not fds:
            return
        reply = session.run(str(message.get("code", "")))
        if limits.kill_background_processes:
            _kill_other_processes(enforcement)
        else:
            _reap_nohang()
        try:
            with os.fdopen(fds[0], "wb", buffering=0, closefd=True) as out:
                out.write(encode(reply))
        except OSError:
            pass
        if reply.get("retire"):
            return
