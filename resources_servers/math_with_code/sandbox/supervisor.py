"""The supervisor: the process the forkserver forks for a session; it holds the channel to the server.

`become_worker` runs in the freshly forked child (still root): it applies the limits (limits.py), drops to the
slot's uid, refuses user namespaces (seccomp.py), then forks the user-code process (worker.py) and relays calls.
User code never holds the server's channel: the user-code process gets only a socket on which the supervisor
sends cells (and never reads), and with each cell a fresh pipe for that cell's reply. The supervisor reads that
pipe with a cap (never more than `reply_bound` bytes), checks every field's type and size, and answers the server
with a frame it wrote itself, carrying the server's sequence number. So code that writes to every descriptor it
finds can make only its own call's reply malformed: that call ends with a clear error and a fresh process, and no
later answer moves. The supervisor is pid 1 of the worker's PID namespace (signals from user code do not reach
it) and not dumpable (user code of the same uid cannot ptrace it or take its descriptors).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import traceback
from typing import Any

from .limits import (
    PR_SET_NO_NEW_PRIVS,
    PR_SET_PDEATHSIG,
    Enforcement,
    SandboxLimits,
    drop_privileges,
    enter_namespaces,
    prctl,
    set_rlimits,
)
from .protocol import HEADER, ProtocolError, checked_reply, decode, recv_frame, reply_bound, send_frame
from .seccomp import deny_user_namespaces, supported
from .worker import children, close_fds, user_main

PR_SET_DUMPABLE = 4
#: Seconds the supervisor waits for the user-code process to finish exiting once its reply pipe closed without a
#: reply: a process that exits closes its descriptors before its exit status can be read.
EXIT_GRACE_S = 2.0
MALFORMED = (
    "the sandbox refused this call's reply ({reason}): the code wrote to the sandbox's internal channel. "
    "The Python process is restarted after this call and all variables are lost"
)


class Malformed(Exception):
    """The user-code process's reply to a call is not a well-formed reply."""


class UserProcess:
    """The user-code process as the supervisor sees it: its pid, a pidfd, and the socket cells go out on."""

    def __init__(self, pid: int, cmd: socket.socket, max_output_chars: int) -> None:
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.cmd = cmd
        self.max_output_chars = max_output_chars
        self.bound = reply_bound(max_output_chars)
        self.status: str | None = None

    def call(self, code: str) -> dict[str, Any]:
        """Run one cell; the checked reply, or a reply saying it was malformed or that the process died."""
        read_end, write_end = os.pipe()
        try:
            try:
                send_frame(self.cmd, {"op": "exec", "code": code}, fds=[write_end])
            finally:
                os.close(write_end)
            body = self._read_reply(read_end)
        except OSError:
            body = None
        except Malformed as exc:
            return self.call_failed(str(exc))
        finally:
            os.close(read_end)
        if body is None:
            return {**self.empty_reply(), "died": self.wait()}
        try:
            return checked_reply(decode(body), self.max_output_chars)
        except (ProtocolError, ValueError, RecursionError) as exc:
            reason = str(exc) if isinstance(exc, ProtocolError) else f"not JSON: {type(exc).__name__}"
            return self.call_failed(reason)

    @staticmethod
    def empty_reply() -> dict[str, Any]:
        return {"success": False, "stdout": "", "stderr": "", "result": None, "error_message": None, "retire": True}

    def call_failed(self, reason: str) -> dict[str, Any]:
        return {**self.empty_reply(), "error_message": MALFORMED.format(reason=reason)}

    def _read_reply(self, fd: int) -> bytes | None:
        """One frame from the reply pipe, at most `bound` bytes; None when the process died without one."""
        want, data, dead = HEADER.size, b"", False
        while len(data) < want:
            ready, _, _ = select.select([fd, self.pidfd], [], [], 0 if dead else None)
            if fd not in ready:
                if dead:  # gone, and nothing more is buffered
                    return None
                dead = True
                continue
            chunk = os.read(fd, min(want - len(data), 1 << 16))
            if not chunk:
                if self._exited(EXIT_GRACE_S):  # it exited (os._exit, a crash): said so, not "malformed"
                    return None
                raise Malformed(f"the reply pipe was closed after {len(data)} bytes")
            data += chunk
            if want == HEADER.size and len(data) == HEADER.size:
                (length,) = HEADER.unpack(data)
                if length > self.bound:
                    raise Malformed(f"a reply of {length} bytes; a reply takes at most {self.bound}")
                want, data = length, b""
        return data

    def _exited(self, wait: float = 0.0) -> bool:
        """The process has exited (waiting up to `wait` seconds for it)."""
        return bool(select.select([self.pidfd], [], [], wait)[0])

    def wait(self) -> str:
        """How the process ended (it has, or is killed now)."""
        if self.status is None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            try:
                _, status = os.waitpid(self.pid, 0)
                self.status = describe(status)
            except ChildProcessError:
                self.status = "ended"
        return self.status

    def reap_orphans(self, kill: bool) -> None:
        """Reap what was re-parented to this process (pid 1 of the namespace), noting the user process's end.
        With `kill`, first kill every such process and wait until it is gone (the user process has already sent
        them SIGKILL after its call; this waits for them)."""
        if kill:
            for pid in children(os.getpid()):
                if pid != self.pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, 0)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self.status = describe(status)


def describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        try:
            return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


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
    """Turn the just-forked child into a session's sandboxed supervisor and serve until the socket closes.
    Never returns."""
    code = 0
    try:
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
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
        close_fds({conn_fd})
        prctl(PR_SET_DUMPABLE, 0)
        prctl(PR_SET_NO_NEW_PRIVS, 1)  # set already with a slot uid; needed for the filter without one
        if supported():
            deny_user_namespaces()
        conn = socket.socket(fileno=conn_fd)
        # Ready before the fork: the seed's answer does not wait for it (a process with numpy and pandas mapped takes
        # tens of ms to fork on a busy machine); the first call does, in the unlikely case it comes sooner.
        send_frame(conn, {"ready": True, "pid": os.getpid()})
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            conn.close()
            ours.close()
            user_main(theirs, workdir, limits, enforcement)
        theirs.close()
        ours.shutdown(socket.SHUT_RD)  # never read: what user code writes to it fails (EPIPE)
        supervise(conn, UserProcess(pid, ours, limits.max_output_chars), limits.kill_background_processes)
    except BaseException:  # noqa: BLE001 - a child must never return into the forkserver's loop
        code = 70
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(code)


def supervise(conn: socket.socket, user: UserProcess, kill_background: bool) -> None:
    """Relay the server's calls to the user-code process; every answer is a frame this process wrote."""
    while True:
        try:
            message, _ = recv_frame(conn)
        except (ProtocolError, OSError, ValueError):
            return
        op = message.get("op")
        reply: dict[str, Any]
        if op == "exec":
            reply = user.call(str(message.get("code", "")))
        elif op == "ping":
            reply = {"ok": True}
        else:
            reply = {"success": False, "stdout": "", "stderr": "", "error_message": f"unknown op {op!r}"}
        user.reap_orphans(kill_background)
        reply["seq"] = message.get("seq")
        try:
            send_frame(conn, reply)
        except OSError:
            return
        if reply.get("retire"):
            user.wait()
            return
