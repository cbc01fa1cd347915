"""What hostile code in a worker can reach on the host, the refusal when the machine allows less, and a project
kept in a private (0700) folder, with real forkservers and workers.

The probes are those of the outside testing (issue 15): the session secret in the worker's environment and in
any process's /proc environ or command line, other processes (the server, the forkserver, other sessions'
workers) listed or signalled, files written outside the working directory, a raw socket made through ctypes, and
`os.kill(1, SIGTERM)`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from math_with_code.sandbox import SandboxLimits, WorkerPool
from math_with_code.sandbox.limits import Enforcement, missing_isolation, plan_exposures

from ngym.child_server import wait_healthy

_spec = importlib.util.spec_from_file_location("isolation_probes", Path(__file__).with_name("isolation_probes.py"))
probes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probes)

LIMITS = SandboxLimits(wall_time_s=5.0, memory_mb=1024, disk_mb=16)
SECRET = "ngym-probe-secret-0123456789abcdef"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")


@root_only
async def test_hostile_code_reaches_no_secret_no_process_no_file_and_no_network(monkeypatch) -> None:
    monkeypatch.setenv("NGYM_SESSION_SECRET", SECRET)
    # a host process with the secret on its command line (as `ngym run ... session_secret=...` would have)
    exposed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"session_secret={SECRET}"])
    listener = socket.create_server(("127.0.0.1", 0))
    pool = WorkerPool(LIMITS, max_workers=4, preload=["math"])
    await pool.start()
    try:
        assert {k: pool.enforcement[k] for k in ("unprivileged_uid", "mount_namespace", "pid_namespace")} == {
            "unprivileged_uid": True,
            "mount_namespace": True,
            "pid_namespace": True,
        }
        a, b = await pool.open_session(), await pool.open_session()
        others = [b.pid, pool.zygote_pid, os.getpid(), exposed.pid]
        writes = [str(Path.home()), os.getcwd(), tempfile.gettempdir(), "/var/tmp"]
        code = probes.probe_code(SECRET, others, listener.getsockname()[1], writes)
        report = probes.parse((await a.execute(code)).as_dict())
        assert report["environ_secret"] is False
        assert report["secret_in_proc"] == []
        # its supervisor (pid 1 of its own PID namespace) and itself: nothing of the host
        assert report["visible_pids"] == [1, 2]
        assert set(report["signalled"].values()) == {"ProcessLookupError"}, report["signalled"]
        assert report["written"] == []
        assert report["connect"] == "Network is unreachable"
        assert report["sigterm_pid1"] == "sent"  # to its supervisor: pid 1 of the namespace ignores it
        assert (await a.execute("21 * 2")).result == "42"  # survived, state kept
        assert (await b.execute("1 + 1")).result == "2"
        await a.close()
        await b.close()
    finally:
        await pool.shutdown()
        exposed.kill()
        exposed.wait()
        listener.close()


@root_only
@pytest.mark.parametrize("mode", [0o700, 0o755])
async def test_a_project_in_a_folder_under_tmp_stays_importable(monkeypatch, mode: int) -> None:
    """`make demo` in a `mktemp -d` clone: the project and its venv sit in a 0700 folder under /tmp, which the
    worker gets covered (it is world-writable) and could not enter anyway (other uid). Its paths are bound back in."""
    folder = tempfile.mkdtemp(prefix="ngym-private-")  # mode 0700, under /tmp
    try:
        os.chmod(folder, mode)
        lib = Path(folder, "clone", "lib")
        lib.mkdir(parents=True)
        (lib / "private_project_module.py").write_text("ANSWER = 42\n")
        monkeypatch.setenv("PYTHONPATH", str(lib))
        pool = WorkerPool(LIMITS, max_workers=2, preload=["math"])
        await pool.start()
        try:
            session = await pool.open_session()
            reply = await session.execute("import private_project_module\nprivate_project_module.ANSWER")
            assert (reply.success, reply.result) == (True, "42"), reply
            listing = await session.execute(f"import os\nos.listdir({folder!r})")
            assert listing.result == "['clone']"  # the folder holds only what was bound back in
            await session.close()
        finally:
            await pool.shutdown()
    finally:
        shutil.rmtree(folder)


def test_plan_exposures_binds_paths_under_covered_and_blocked_directories(tmp_path: Path) -> None:
    private = tmp_path / "private"
    (private / "venv" / "lib").mkdir(parents=True)
    private.chmod(0o700)
    plan = plan_exposures([str(private / "venv"), str(private / "venv" / "lib"), "/usr/lib"], ["/var/tmp"])
    blocked = next(c for c in plan if c != "/var/tmp")
    assert str(private).startswith(blocked)
    assert plan[blocked] == [str(private / "venv")]  # the child is inside the parent's bind
    assert plan["/var/tmp"] == []
    assert plan_exposures([str(private / "venv")], ["/var/tmp"], blocked=False) == {"/var/tmp": []}


def test_missing_isolation_names_each_absent_guarantee() -> None:
    full = Enforcement(unprivileged_uid=True, network_namespace=True, mount_namespace=True, pid_namespace=True)
    assert missing_isolation(full, SandboxLimits()) == []
    weak = Enforcement(unprivileged_uid=True, mount_namespace=True)
    missing = missing_isolation(weak, SandboxLimits())
    assert len(missing) == 2 and "PID namespace" in missing[0] and "network namespace" in missing[1]
    assert len(missing_isolation(weak, SandboxLimits(allow_network=True))) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@root_only
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_without_cap_sys_admin_the_server_refuses_unless_allowed_weak() -> None:
    """Root without CAP_SYS_ADMIN (a container started without --cap-add SYS_ADMIN): no namespaces, so the server
    does not start, and says why and how to opt out; with allow_weak_sandbox=true it serves."""
    ngym = str(Path(sys.executable).parent / "ngym")
    drop = ["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]
    run = [*drop, ngym, "run", "math_with_code", "preload_modules=[math]"]
    refused = subprocess.run([*run, "--port", str(_free_port())], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "math_with_code refuses to run untrusted code" in refused.stderr
    assert "allow_weak_sandbox: true" in refused.stderr and "Traceback" not in refused.stderr
    port = _free_port()
    served = subprocess.Popen(
        [*run, "allow_weak_sandbox=true", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", served, 60)
        enforcement = httpx.get(f"http://127.0.0.1:{port}/sandbox").json()["enforcement"]
        assert (enforcement["unprivileged_uid"], enforcement["mount_namespace"]) == (True, False)
    finally:
        served.terminate()
        served.wait(timeout=20)
