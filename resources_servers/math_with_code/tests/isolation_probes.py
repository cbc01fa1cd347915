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
