"""Hostile code an outside tester ran through `execute_python`, as one cell that reports what it could reach.

Shared by the host tests (test_isolation.py) and the container test (tests/docker/test_math_sandbox_image.py).
`probe_code(secret, pids, port)` returns code whose trailing expression is a JSON object:
  environ_secret      the secret is in the worker's own environment
  secret_in_proc      /proc/PID/{environ,cmdline} files where the secret was found (any readable process)
  visible_pids        the pids listed in the worker's /proc
  signalled           pids of `pids` that os.kill(pid, 0) reached ("ok") or the error name
  written             paths of `writes` the worker could create a file in
  connect             what a raw socket made through ctypes (bypassing the audit hook) got connecting to `port`
  sigterm_pid1        what os.kill(1, SIGTERM) raised, or "sent"
"""

from __future__ import annotations

import json

PROBE = r"""
import ctypes, json, os, signal, socket, struct
SECRET, PIDS, PORT, WRITES = {secret!r}, {pids!r}, {port!r}, {writes!r}
out = {{"environ_secret": any(SECRET in v for v in os.environ.values())}}
hits = []
for p in os.listdir("/proc"):
    if p.isdigit():
        for f in ("environ", "cmdline"):
            try:
                if SECRET.encode() in open(f"/proc/{{p}}/{{f}}", "rb").read():
                    hits.append(f"{{p}}/{{f}}")
            except OSError:
                pass
out["secret_in_proc"] = hits
out["visible_pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
signalled = {{}}
for pid in PIDS:
    try:
        os.kill(pid, 0)
        signalled[pid] = "ok"
    except OSError as exc:
        signalled[pid] = type(exc).__name__
out["signalled"] = signalled
written = []
for path in WRITES:
    try:
        with open(os.path.join(path, ".ngym-probe"), "w") as f:
            f.write("x")
        written.append(path)
    except OSError:
        pass
out["written"] = written
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
addr = struct.pack("HH4s8x", socket.AF_INET, socket.htons(PORT), bytes([127, 0, 0, 1]))
rc = libc.connect(fd, addr, 16) if fd >= 0 else -1
out["connect"] = "connected" if rc == 0 else os.strerror(ctypes.get_errno())
try:
    os.kill(1, signal.SIGTERM)
    out["sigterm_pid1"] = "sent"
except OSError as exc:
    out["sigterm_pid1"] = type(exc).__name__
json.dumps(out)
"""


def probe_code(secret: str, pids: list[int], port: int, writes: list[str]) -> str:
    return PROBE.format(secret=secret, pids=pids, port=port, writes=writes)


def parse(reply: dict) -> dict:
    """The probe's report from an execute_python reply (fails loudly when the cell itself failed)."""
    assert reply["success"], reply
    return json.loads(reply["result"])


#: Reply frames user code forges (the body after the 4-byte length), by what they try: an answer past every cap,
#: JSON nested past the parser's recursion limit, NaN where text belongs, wrong types, and a well-formed reply that
#: would answer the next call if it were queued behind this one's.
FORGED_BODIES = {
    "huge": 'b\'{"success": true, "stdout": "\' + b"x" * (60 * 1024 * 1024) + b\'", "stderr": "", "result": null}\'',
    "nested": 'b"[" * 200000 + b"]" * 200000',
    "nan": 'b\'{"success": true, "stdout": NaN, "stderr": "", "result": NaN, "error_message": null}\'',
    "types": 'b\'{"success": "yes", "stdout": ["x"], "stderr": {"a": 1}, "result": 7, "retire": "no"}\'',
    "queued": 'b\'{"success": true, "stdout": "forged", "stderr": "", "result": "forged", "error_message": null}\'',
}

FORGE = r"""
import os, stat, struct
body = {body}
frame = struct.pack(">I", len(body)) + body
del body
written = []
for name in sorted(os.listdir("/proc/self/fd"), key=int):
    fd = int(name)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        continue
    if fd > 2 and (stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode)):
        view = memoryview(frame)
        try:
            while view:
                view = view[os.write(fd, view):]
            written.append(fd)
        except OSError:
            pass
del frame, view
"own reply"
"""

#: Whether user code can make a user namespace (unshare(CLONE_NEWUSER), and raw clone with it on x86_64).
USERNS = r"""
import ctypes, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
out = {}
rc = libc.unshare(0x10000000)
out["unshare"] = "ok" if rc == 0 else os.strerror(ctypes.get_errno())
if platform.machine() == "x86_64":
    rc = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD): a fork when allowed
    if rc == 0:
        os._exit(0)
    if rc > 0:
        os.waitpid(rc, 0)
    out["clone"] = "ok" if rc > 0 else os.strerror(ctypes.get_errno())
json.dumps(out)
"""


def forge_code(kind: str) -> str:
    """Code that writes a forged reply frame of `kind` (FORGED_BODIES) to every socket and pipe it holds."""
    return FORGE.format(body=FORGED_BODIES[kind])


#: Whether user code can reach its supervisor (pid 1 of its namespace), which holds the server's channel: list or
#: read its descriptors and memory, take a descriptor with pidfd_getfd, or ptrace it.
SUPERVISOR = r"""
import ctypes, json, os
out = {}
for what, path in (("fd", "/proc/1/fd"), ("mem", "/proc/1/mem")):
    try:
        os.listdir(path) if what == "fd" else open(path, "rb").close()
        out[what] = "ok"
    except OSError as exc:
        out[what] = type(exc).__name__
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
pidfd = libc.syscall(434, 1, 0)  # pidfd_open(1, 0)
taken = [libc.syscall(438, pidfd, fd, 0) for fd in range(3, 16)] if pidfd >= 0 else []  # pidfd_getfd
out["getfd"] = "ok" if any(t >= 0 for t in taken) else "refused"
out["ptrace"] = "ok" if libc.ptrace(16, 1, 0, 0) == 0 else "refused"  # PTRACE_ATTACH
json.dumps(out)
"""
