"""The limits a sandboxed Python worker runs under, and the code that applies them inside a freshly forked child.

Everything here that touches the OS runs in the worker child *before* it starts running user code, while it is
still root: the worker was forked as pid 1 of a new PID namespace (zygote.py); it enters new network and mount
namespaces, mounts its own /proc (so it sees no other process: not the server, not other slots, no command line of
the host), mounts a private size-limited tmpfs as its working directory, hides the world-writable directories and
the directories others may not enter (with only the interpreter's own paths bound back in), joins per-worker
cgroups when they are available, sets rlimits, and finally drops to an unprivileged uid that belongs to its pool
slot alone (so RLIMIT_NPROC counts only its own processes, which is what makes the process cap hold when the server
runs as root). `missing_isolation` names what the machine did not allow; the server refuses to start then unless
`allow_weak_sandbox` is set.
See docs/math_with_code.md for what each limit enforces and how.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import resource
import stat
from dataclasses import asdict, dataclass, field
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36

# World-writable places a worker could otherwise leave files in; each is hidden behind an empty root-owned tmpfs.
HIDDEN_DIR_CANDIDATES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/run/shm", "/dev/mqueue")


@dataclass(frozen=True)
class SandboxLimits:
    """Per-worker limits. Defaults are safe for thousands of concurrent sessions on one machine."""

    wall_time_s: float = 10.0
    """Wall-clock seconds one execute call may take; past it the worker is killed and replaced (state lost)."""
    cpu_time_s: int = 120
    """CPU seconds a worker process may use over its lifetime (RLIMIT_CPU; each child process has its own)."""
    memory_mb: int = 2048
    """Address space of each process (RLIMIT_AS), and the memory cgroup limit of the whole worker when available."""
    max_processes: int = 16
    """Processes and threads the worker may have at once, itself included (RLIMIT_NPROC on a per-slot uid,
    plus a cgroup pids.max when available)."""
    max_output_chars: int = 16_384
    """Characters of stdout, of stderr and of the result kept per call; the rest is dropped behind a marker."""
    max_code_chars: int = 1_000_000
    """Characters of code one call may send; longer code is refused without running (the session keeps its state)."""
    disk_mb: int = 64
    """Size of the private tmpfs working directory (and RLIMIT_FSIZE for any single file)."""
    max_open_files: int = 256
    """RLIMIT_NOFILE."""
    allow_network: bool = False
    """False: the worker gets its own empty network namespace (loopback only, down) and socket creation for any
    family other than AF_UNIX raises PermissionError."""
    kill_background_processes: bool = True
    """After each call, kill every other process the worker started (they do not persist between calls)."""


@dataclass
class Enforcement:
    """Which isolation layers this machine allowed (probed once when the forkserver starts)."""

    unprivileged_uid: bool = False
    network_namespace: bool = False
    mount_namespace: bool = False
    pid_namespace: bool = False  # each worker is pid 1 of its own PID namespace, with its own /proc
    cgroup: str | None = None  # "v2", "v1" or None
    hidden_dirs: list[str] = field(default_factory=list)
    exposed: dict[str, list[str]] = field(default_factory=dict)  # covered directory -> paths bound back in
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: What a worker needs so that untrusted code cannot reach the server, other sessions, the network or secrets.
REQUIRED_ISOLATION = {
    "unprivileged_uid": "a uid of its own per worker (needs root, or CAP_SETUID and CAP_SETGID)",
    "mount_namespace": "a private mount namespace (needs CAP_SYS_ADMIN and a seccomp profile allowing unshare/mount)",
    "pid_namespace": "a PID namespace with its own /proc (needs CAP_SYS_ADMIN, unshare and mount of proc)",
    "network_namespace": "an empty network namespace (needs CAP_SYS_ADMIN and unshare)",
}


def missing_isolation(enforcement: Enforcement, limits: SandboxLimits) -> list[str]:
    """The guarantees of REQUIRED_ISOLATION this machine did not allow (the network one only when it is off)."""
    needed = [k for k in REQUIRED_ISOLATION if k != "network_namespace" or not limits.allow_network]
    return [f"{REQUIRED_ISOLATION[k]}" for k in needed if not getattr(enforcement, k)]


_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(libc().unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(libc().setns(fd, nstype), "setns")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    fs = fstype.encode() if fstype else None
    options = data.encode() if data else None
    _check(libc().mount(source.encode(), target.encode(), fs, flags, options), f"mount {target}")


def prctl(option: int, arg: int) -> None:
    _check(libc().prctl(option, arg, 0, 0, 0), "prctl")


def world_writable_dirs() -> list[str]:
    """The candidate directories that exist here and that anyone may write into."""
    found = []
    for path in HIDDEN_DIR_CANDIDATES:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH and os.path.realpath(path) not in found:
            found.append(os.path.realpath(path))
    return found


def interpreter_paths() -> list[str]:
    """The directories the worker must be able to read to import modules lazily (stdlib, site-packages, ...),
    plus the directory of every imported top-level package (an editable install's finder maps a package to its
    source tree, which is on no sys.path entry)."""
    import sys

    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path) if p}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if "." not in name and isinstance(file, str):
            paths.add(os.path.dirname(os.path.realpath(file)))
    return sorted(p for p in paths if os.path.isdir(p))


def blocked_ancestor(path: str) -> str | None:
    """The top-most ancestor of `path` that a process with no matching uid/gid cannot traverse (no o+x)."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        ancestor = "/" + "/".join(parts[:i])
        try:
            if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                return ancestor if ancestor != path else None
        except OSError:
            return None
    return None


def plan_exposures(paths: list[str], hidden_dirs: list[str], blocked: bool = True) -> dict[str, list[str]]:
    """The directories a worker gets covered by an empty tmpfs, each with the paths of `paths` bound back in.

    Covers are the world-writable `hidden_dirs` and, with `blocked` (the worker is not root), each blocked ancestor
    of a path (e.g. /root, mode 0700, holding a pyenv Python, or a private `mktemp -d` folder holding the project
    and its venv). A cover inside another cover is dropped: the outer one hides it already. The paths under a cover
    (the venv inside a hidden /tmp, say) are bound back in, so the worker can still import from them."""
    covers = set(hidden_dirs)
    if blocked:
        covers |= {a for a in map(blocked_ancestor, paths) if a is not None}
    covers = {c for c in covers if not any(c.startswith(o + "/") for o in covers)}
    plan: dict[str, list[str]] = {c: [] for c in sorted(covers)}
    for path in sorted(paths):  # a parent sorts before its children
        cover = next((c for c in covers if path.startswith(c + "/")), None)
        if cover is not None and not any(path == k or path.startswith(k + "/") for k in plan[cover]):
            plan[cover].append(path)
    return plan


def _cover_and_expose(exposed: dict[str, list[str]], hidden_dirs: list[str]) -> None:
    """Cover each directory of `exposed` with an empty root-owned tmpfs (the world-writable ones noexec too), then
    bind the paths listed under it back in, so the unprivileged worker can import from them and see nothing else.

    The paths are opened (O_PATH) before anything is covered and bound from /proc/self/fd/N afterwards: the magic
    link resolves to the original directory although its path is hidden under a cover by then."""
    kept: list[tuple[str, int]] = []
    try:
        for paths in exposed.values():
            for path in paths:
                with contextlib.suppress(OSError):  # gone since start-up: nothing to bind
                    kept.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)))
        for cover in exposed:
            # Root-owned and empty: the unprivileged worker cannot create anything in it.
            flags = MS_NOSUID | MS_NODEV | (MS_NOEXEC if cover in hidden_dirs else 0)
            mount("tmpfs", cover, "tmpfs", flags, "size=4m,nr_inodes=1024,mode=0755")
        for path, fd in kept:
            os.makedirs(path, mode=0o755, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None)
    finally:
        for _, fd in kept:
            os.close(fd)


def enter_namespaces(enforcement: Enforcement, limits: SandboxLimits, workdir: str, uid: int) -> None:
    """In the child, as root: new network and mount namespaces, its own /proc (the child is pid 1 of a new PID
    namespace when `enforcement.pid_namespace`), covered directories, a private tmpfs working directory."""
    flags = 0
    if enforcement.network_namespace and not limits.allow_network:
        flags |= CLONE_NEWNET
    if enforcement.mount_namespace:
        flags |= CLONE_NEWNS
    if flags:
        unshare(flags)
    if enforcement.mount_namespace:
        mount("none", "/", None, MS_REC | MS_PRIVATE, None)
        _cover_and_expose(enforcement.exposed, enforcement.hidden_dirs)
        if enforcement.pid_namespace:
            # A fresh proc for this PID namespace: only this worker and what it starts are listed; the server's
            # and other sessions' /proc/PID/{environ,cmdline} do not exist here. It covers the host's /proc.
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        os.makedirs(workdir, mode=0o755, exist_ok=True)
        mount(
            "tmpfs",
            workdir,
            "tmpfs",
            MS_NOSUID | MS_NODEV,
            f"size={limits.disk_mb}m,nr_inodes=16384,mode=0700,uid={uid},gid={uid}",
        )


def set_rlimits(limits: SandboxLimits, nproc: bool) -> None:
    """Rlimits inherited by the worker and every process it starts (hard == soft, except CPU: see worker.py).

    RLIMIT_NPROC counts every process of the real uid, so it is only set when the worker has a uid of its own.
    """
    mem = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_time_s, limits.cpu_time_s + 2))
    if nproc:
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes, limits.max_processes))
    fsize = limits.disk_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files, limits.max_open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))


def drop_privileges(uid: int) -> None:
    """Become uid/gid `uid` with no supplementary groups and no way back (no_new_privs: setuid bits are ignored)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if os.getuid() == 0 or os.geteuid() == 0:
        raise OSError(errno.EPERM, "could not drop root privileges")
