"""The forkserver ("zygote"): one long-lived process that has numpy/scipy/pandas imported and forks workers.

Started by the pool with a control socket and an environment stripped of everything but locale, PATH and Python
paths (no session secret, no credentials: a worker is a fork of this process, environment block included). It is
single-threaded and handles one request at a time:
  spawn {slot} + a socket fd  -> fork a worker on that socket, as pid 1 of a new PID namespace when the machine
                                 allows it (unshare(CLONE_NEWPID) before the fork, setns back after it, so the
                                 worker's pid here is a plain pid: pidfd, killpg and waitpid work as usual, and
                                 when the worker dies the kernel kills everything left in its namespace);
                                 reply {pid, workdir} + a pidfd for the worker
  kill {slot, workdir?}       -> kill every process of the slot (its uid, its cgroup, its process group), wait until
                                 they are gone, remove the slot's working directory; reply {remaining}
  status {pid}                -> how a worker ended, when known
  exit                        -> kill every live slot and exit (also done when the control socket closes)
It is a child subreaper, so anything a worker leaves behind is re-parented to it and reaped. When the server dies
(even by SIGKILL) it gets SIGTERM (PR_SET_PDEATHSIG), kills every slot, removes its cgroups and work root, and exits;
the workers die with it. At start it kills whatever a predecessor that died without cleaning up (SIGKILL) left
running in its uid range (the range is claimed by a lock, so no live pool uses those uids).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from typing import Any

from .cgroups import TAG_PREFIX, SlotCgroups
from .limits import (
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    MS_PRIVATE,
    MS_REC,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_PDEATHSIG,
    Enforcement,
    SandboxLimits,
    interpreter_paths,
    mount,
    plan_exposures,
    prctl,
    setns,
    unshare,
    world_writable_dirs,
)
from .protocol import ProtocolError, recv_frame, send_frame
from .supervisor import become_worker

MIN_WORKER_UID = 1000


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by {name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _proc_uids() -> list[tuple[int, int]]:
    """(pid, real uid) of every process in /proc, zombies included."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        found.append((int(entry.name), int(line.split()[1])))
                        break
        except OSError:
            continue
    return found


WORK_ROOT_LOCK = ".forkserver.lock"
DEFAULT_WORK_ROOT_PREFIX = "ngym-math-with-code-"


def claim_work_root(work_root: str) -> Any:
    """Create the work root and lock it for this forkserver's lifetime; the lock is how a later forkserver knows a
    work root was abandoned. With the default naming (`ngym-math-with-code-<pid>`), first remove the abandoned
    sibling work roots of forkservers killed before they could clean up: those holding a lock file nobody holds.
    Returns the open lock file: keep it."""
    parent, name = os.path.split(os.path.abspath(work_root))
    if name.startswith(DEFAULT_WORK_ROOT_PREFIX):
        with contextlib.suppress(OSError):
            for entry in os.scandir(parent):
                if entry.name == name or not entry.name.startswith(DEFAULT_WORK_ROOT_PREFIX):
                    continue
                try:
                    fd = os.open(os.path.join(entry.path, WORK_ROOT_LOCK), os.O_RDWR | os.O_CLOEXEC)
                except OSError:
                    continue  # no lock file: not a work root of this version, left alone
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    shutil.rmtree(entry.path, ignore_errors=True)
                except OSError:
                    pass  # in use
                finally:
                    os.close(fd)
    path = os.path.join(work_root, WORK_ROOT_LOCK)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        # A sibling forkserver sweeping at this moment may hold the lock briefly and remove a fresh root: redo it.
        os.makedirs(work_root, mode=0o711, exist_ok=True)
        os.chmod(work_root, 0o711)
        try:
            lock = open(path, "a")  # noqa: SIM115 - held for the process's lifetime
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            time.sleep(0.05)
            continue
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == os.fstat(lock.fileno()).st_ino:
                return lock
        lock.close()
    raise OSError(f"the work root {work_root} is in use by another forkserver: give each server its own work_root")


def _probe_pid_namespace(notes: list[str]) -> bool:
    """In the probe child (own mount namespace): can a child be pid 1 of a new PID namespace with its own /proc?"""
    try:
        unshare(CLONE_NEWPID)
    except OSError as exc:
        notes.append(f"PID namespace unavailable: {exc}")
        return False
    child = os.fork()
    if child == 0:
        try:
            mount("proc", "/proc", "proc", 0, None)
            os._exit(0 if os.getpid() == 1 and os.listdir("/proc/self") else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        notes.append("PID namespace unavailable: cannot mount a private /proc in it")
        return False
    return True


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


class Zygote:
    def __init__(self, ctl: socket.socket, config: dict[str, Any]) -> None:
        self.ctl = ctl
        self.limits = SandboxLimits(**config["limits"])
        self.uid_base = int(config["uid_base"])
        self.max_slots = int(config["max_slots"])
        self.work_root = config["work_root"]
        self.pid = os.getpid()
        self.enforcement = Enforcement()
        self.cgroups: SlotCgroups | None = None
        self.slot_pids: dict[int, int] = {}
        self.slot_dirs: dict[int, str] = {}
        self.exit_status: dict[int, str] = {}
        self.live: set[int] = set()  # worker pids forked and not yet reaped (safe to signal)
        # A worker in its own PID namespace cannot see this process (getppid() is 0 there): it checks this pidfd
        # instead to learn that the forkserver died before its PR_SET_PDEATHSIG was armed.
        self.pidfd = os.pidfd_open(self.pid)
        self.pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)

    # ---- start-up -------------------------------------------------------------------------------------------
    def probe(self) -> None:
        """Find out once, in a throw-away child, which isolation layers this machine allows."""
        e = self.enforcement
        if os.geteuid() != 0:
            e.notes.append("not running as root: no namespaces, no per-slot uid, no RLIMIT_NPROC (rlimits only)")
            return
        probe_dir = tempfile.mkdtemp(prefix="probe-", dir=self.work_root)
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            found: dict[str, Any] = {"notes": []}
            try:
                os.close(rfd)
                try:
                    unshare(CLONE_NEWNET)
                    found["network_namespace"] = True
                except OSError as exc:
                    found["notes"].append(f"network namespace unavailable: {exc}")
                try:
                    unshare(CLONE_NEWNS)
                    mount("none", "/", None, MS_REC | MS_PRIVATE, None)
                    mount("tmpfs", probe_dir, "tmpfs", 0, "size=1m")
                    found["mount_namespace"] = True
                    found["pid_namespace"] = _probe_pid_namespace(found["notes"])
                except OSError as exc:
                    found["notes"].append(f"mount namespace unavailable: {exc}")
                try:
                    uid = self.uid_base + self.max_slots
                    os.setgroups([])
                    os.setresgid(uid, uid, uid)
                    os.setresuid(uid, uid, uid)
                    found["unprivileged_uid"] = os.getuid() == uid
                except OSError as exc:
                    found["notes"].append(f"cannot switch to an unprivileged uid: {exc}")
                os.write(wfd, json.dumps(found).encode())
            finally:
                os._exit(0)
        os.close(wfd)
        data = b""
        while chunk := os.read(rfd, 65536):
            data += chunk
        os.close(rfd)
        os.waitpid(pid, 0)
        shutil.rmtree(probe_dir, ignore_errors=True)
        found = json.loads(data or b"{}")
        e.network_namespace = bool(found.get("network_namespace"))
        e.mount_namespace = bool(found.get("mount_namespace"))
        e.pid_namespace = bool(found.get("pid_namespace"))
        e.unprivileged_uid = bool(found.get("unprivileged_uid")) and self.uid_base >= MIN_WORKER_UID
        e.notes.extend(found.get("notes", []))
        if e.unprivileged_uid:
            self.sweep_stale()
        if e.mount_namespace:
            e.hidden_dirs = world_writable_dirs()
            e.exposed = plan_exposures(interpreter_paths(), e.hidden_dirs, blocked=e.unprivileged_uid)
        self.cgroups, note = SlotCgroups.create(f"{TAG_PREFIX}{self.pid}")
        e.cgroup = self.cgroups.version if self.cgroups else None
        if not self.cgroups:
            e.notes.append(f"no per-worker cgroup: {note}")

    def sweep_stale(self) -> int:
        """Kill every process running as one of this pool's worker uids. Called at start-up, before any worker is
        forked: such processes can only be left by a predecessor pool that was killed before it could clean up (the
        server holds the uid range's lock). Returns how many were found."""
        stale = self._range_pids()
        for uid in {uid for uid, _ in stale}:
            self._kill_uid(uid, uid - self.uid_base)
        return len(stale)

    def _range_pids(self) -> list[tuple[int, int]]:
        """(uid, pid) of every process whose real uid is in [uid_base, uid_base + max_slots)."""
        found = []
        for pid, uid in _proc_uids():
            if self.uid_base <= uid < self.uid_base + self.max_slots:
                found.append((uid, pid))
        return found

    # ---- reaping --------------------------------------------------------------------------------------------
    def reap(self) -> list[int]:
        done = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            done.append(pid)
            self.live.discard(pid)
            self.exit_status[pid] = _describe(status)
        if len(self.exit_status) > 4096:
            for pid in list(self.exit_status)[:2048]:
                del self.exit_status[pid]
        return done

    # ---- requests -------------------------------------------------------------------------------------------
    def spawn(self, slot: int, conn_fd: int) -> dict[str, Any]:
        if not 0 <= slot < self.max_slots:
            os.close(conn_fd)
            return {"error": f"slot {slot} out of range"}
        uid = self.uid_base + slot
        workdir = tempfile.mkdtemp(prefix=f"slot{slot}-", dir=self.work_root)
        if self.enforcement.unprivileged_uid:
            os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o700)
        if self.cgroups is not None:
            mem = (self.limits.memory_mb + self.limits.disk_mb) * 1024 * 1024
            self.cgroups.prepare_slot(slot, self.limits.max_processes, mem)
        if self.enforcement.pid_namespace:
            unshare(CLONE_NEWPID)  # the next child is pid 1 of a new PID namespace
        pid = -1
        try:
            pid = os.fork()
        finally:
            if self.enforcement.pid_namespace and pid != 0:
                setns(self.pid_ns, CLONE_NEWPID)  # later children (kill helpers, workers) start from here again
        if pid == 0:
            self.ctl.close()
            become_worker(conn_fd, slot, uid, workdir, self.limits, self.enforcement, self.cgroups, self.pidfd)
        os.close(conn_fd)
        self.slot_pids[slot] = pid
        self.live.add(pid)
        self.slot_dirs[slot] = workdir
        return {"pid": pid, "workdir": workdir, "uid": uid}

    def kill_slot(self, slot: int) -> int:
        """Kill everything the slot runs; returns how many processes were still found at the end (0 = clean)."""
        uid = self.uid_base + slot
        pid = self.slot_pids.pop(slot, None)
        if pid is not None and pid in self.live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the worker is a session/group leader (setsid)
        if self.cgroups is not None:
            self.cgroups.kill_slot(slot)
        remaining = 0
        if self.enforcement.unprivileged_uid and uid >= MIN_WORKER_UID:
            remaining = self._kill_uid(uid, slot)
        if pid is not None:
            # Until the supervisor is reaped: as its PID namespace's init it exits only once the kernel has killed
            # and reaped everything in the namespace, after it has left the slot's cgroup.
            deadline = time.monotonic() + 3
            while pid in self.live and time.monotonic() < deadline:
                self.reap()
                time.sleep(0.0005)
            remaining += pid in self.live
        workdir = self.slot_dirs.pop(slot, None)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        self.reap()
        return remaining

    def _kill_uid(self, uid: int, slot: int) -> int:
        """Kill every process of `uid` and wait until none is left (zombies re-parented to us are reaped here).
        Returns how many were still there after 3 s (0 = clean)."""
        deadline = time.monotonic() + 3
        while True:
            left = self._uid_pids(uid, slot)
            if not left or time.monotonic() > deadline:
                return len(left)
            if any(self._state(pid) != "Z" for pid in left):
                self._kill_all_as(uid)
            self.reap()
            time.sleep(0.0005)

    def _kill_all_as(self, uid: int) -> None:
        """A helper child becomes `uid` and calls kill(-1, SIGKILL): every process of that uid at once (a process
        with a fatal signal pending can no longer fork, so one sweep leaves nothing to run)."""
        helper = os.fork()
        if helper == 0:
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        while helper not in self.reap():
            time.sleep(0.0002)
        self.exit_status.pop(helper, None)

    def _uid_pids(self, uid: int, slot: int) -> list[int]:
        """Processes (zombies included) whose real uid is `uid`: the slot's cgroup when there is one, else /proc."""
        if self.cgroups is not None:
            pids = self.cgroups.slot_pids(slot)
            if pids is not None:
                return pids
        return [pid for pid, real_uid in _proc_uids() if real_uid == uid]

    @staticmethod
    def _state(pid: int) -> str:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return "Z"

    def handle(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any] | None:
        op = message.get("op")
        if op == "spawn":
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                return {"error": "spawn needs exactly one socket fd"}
            return self.spawn(int(message["slot"]), fds[0])
        for fd in fds:
            os.close(fd)
        if op == "kill":
            return {"remaining": self.kill_slot(int(message["slot"]))}
        if op == "status":
            pid = int(message["pid"])
            deadline = time.monotonic() + 0.5
            while pid in self.live and time.monotonic() < deadline:
                self.reap()
                time.sleep(0.001)
            return {"status": self.exit_status.get(pid)}
        if op == "exit":
            return None
        return {"error": f"unknown op {op!r}"}

    def shutdown(self) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
        for slot in list(self.slot_pids):
            self.kill_slot(slot)
        if self.cgroups is not None:
            self.cgroups.remove()
        # Again for a moment if it is still there: on a loaded machine a slot's process killed a moment ago may
        # still have written into the tree while it was walked (seen once in CI at load average 20+).
        deadline = time.monotonic() + 2
        shutil.rmtree(self.work_root, ignore_errors=True)
        while os.path.lexists(self.work_root) and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
            shutil.rmtree(self.work_root, ignore_errors=True)

    def serve(self) -> None:
        """Answer requests until `exit` or until the control socket closes (the caller then calls shutdown)."""
        while True:
            readable, _, _ = select.select([self.ctl], [], [], 0.5)
            self.reap()
            if not readable:
                continue
            try:
                message, fds = recv_frame(self.ctl, max_fds=4)
            except (ProtocolError, OSError):
                return
            reply = self.handle(message, fds)
            if reply is None:
                send_frame(self.ctl, {"ok": True})
                return
            if "pid" in reply and message.get("op") == "spawn":
                pidfd = os.pidfd_open(reply["pid"])
                try:
                    send_frame(self.ctl, reply, fds=[pidfd])
                finally:
                    os.close(pidfd)
            else:
                send_frame(self.ctl, reply)


def main() -> None:
    ctl_fd = int(sys.argv[1])
    config = json.loads(sys.argv[2])
    # The server dying (even by SIGKILL) sends SIGTERM, which unwinds into Zygote.shutdown: every slot is killed,
    # background processes included, and the cgroups and work root are removed.
    signal.signal(signal.SIGTERM, _on_sigterm)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(config["parent_pid"]):
        sys.exit(1)
    with contextlib.suppress(OSError):
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctl = socket.socket(fileno=ctl_fd)
    preload_errors = []
    for name in config.get("preload", []):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            preload_errors.append(f"{name}: {exc!r}")
    gc.collect()
    gc.freeze()  # keep the preloaded objects' pages shared with the workers (no refcount/GC writes)
    try:
        work_root_lock = claim_work_root(config["work_root"])  # noqa: F841 - held until exit
    except OSError as exc:
        send_frame(ctl, {"ready": False, "error": str(exc)})
        sys.exit(1)
    zygote = Zygote(ctl, config)
    try:
        zygote.probe()
        zygote.enforcement.notes.extend(f"preload failed: {e}" for e in preload_errors)
        send_frame(ctl, {"ready": True, "pid": os.getpid(), "enforcement": zygote.enforcement.as_dict()})
        zygote.serve()
    finally:
        zygote.shutdown()


if __name__ == "__main__":
    main()
