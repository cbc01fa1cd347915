"""The sandbox pool with real worker processes: persistence, isolation, every limit, and reaping (counted in /proc).

Floods are bounded (a few hundred sleeping children at most), never an unbounded fork bomb.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest
import pytest_asyncio
from math_with_code.sandbox import PoolExhausted, SandboxError, SandboxLimits, WorkerPool

pytestmark = pytest.mark.asyncio(loop_scope="module")

LIMITS = SandboxLimits(wall_time_s=2.0, memory_mb=1024, max_processes=16, max_output_chars=4096, disk_mb=16)


def uid_processes(pool: WorkerPool) -> list[int]:
    """Every process (zombies included) whose real uid is one of the pool's worker uids."""
    low, high = pool.uid_base, pool.uid_base + pool.max_workers
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for line in Path(entry.path, "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    if low <= int(line.split()[1]) < high:
                        found.append(int(entry.name))
                    break
        except OSError:
            continue
    return found


def children_of(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def processes_of(*sessions) -> list[int]:
    """Each session's two processes, sorted: its supervisor and the one user-code process the supervisor forked
    (anything else the code started is gone after a call)."""
    found = []
    for s in sessions:
        kids = children_of(s.pid)
        assert len(kids) == 1, kids
        found += [s.pid, *kids]
    return sorted(found)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def pool():
    pool = WorkerPool(LIMITS, max_workers=64)
    await pool.start()
    yield pool
    await pool.shutdown()


async def test_state_persists_within_a_session_and_not_across(pool: WorkerPool) -> None:
    a, b = await pool.open_session(), await pool.open_session()
    try:
        r = await a.execute("import numpy as np\ndef sq(v):\n    return v * v\nx = np.arange(5)")
        assert r.success and r.result is None
        r = await a.execute("sq(int(x.sum()))")
        assert (r.success, r.result) == (True, "100")
        r = await b.execute("x")
        assert not r.success and r.error_message == "NameError: name 'x' is not defined"
        code = "import scipy, pandas\nprint(pandas.Series([1, 2]).sum(), end='')\nscipy.special.comb(5, 2)"
        r = await b.execute(code)
        assert (r.success, r.stdout, r.result) == (True, "3", "10.0")
        r = await a.execute("1/0")
        assert not r.success and r.error_message == "ZeroDivisionError: division by zero"
        assert "ZeroDivisionError" in r.stderr and "<cell 3>" in r.stderr
        assert (await a.execute("len(x)")).result == "5"  # an exception does not lose state
    finally:
        await a.close()
        await b.close()


async def test_fifty_sessions_in_parallel_get_their_own_answers(pool: WorkerPool) -> None:
    sessions = await asyncio.gather(*(pool.open_session() for _ in range(50)))
    assert len({s.pid for s in sessions}) == 50

    async def run(i: int, session) -> str | None:
        await session.execute(f"secret = {i}")
        return (await session.execute("secret * 1000 + 7")).result

    results = await asyncio.gather(*(run(i, s) for i, s in enumerate(sessions)))
    assert results == [str(i * 1000 + 7) for i in range(50)]
    assert len(uid_processes(pool)) == 100  # a supervisor and a user-code process each
    await asyncio.gather(*(s.close() for s in sessions))
    assert uid_processes(pool) == []


async def test_infinite_loop_is_killed_and_the_session_told_its_state_is_lost(pool: WorkerPool) -> None:
    victim, neighbour = await pool.open_session(), await pool.open_session()
    try:
        await victim.execute("x = 1")
        await neighbour.execute("y = 2")
        old_pid = victim.pid
        r, n = await asyncio.gather(victim.execute("while True: pass"), neighbour.execute("y + 1"))
        assert not r.success and r.state_lost
        assert "wall-clock limit of 2 s" in r.error_message and "lost" in r.error_message
        assert n.result == "3"
        assert victim.pid != old_pid
        assert "NameError" in (await victim.execute("x")).error_message
        assert (await victim.execute("40 + 2")).result == "42"  # the replacement works
        assert sorted(uid_processes(pool)) == processes_of(victim, neighbour)
    finally:
        await victim.close()
        await neighbour.close()


async def test_huge_allocation_fails_with_a_memory_error(pool: WorkerPool) -> None:
    s = await pool.open_session()
    try:
        await s.execute("keep = 5")
        r = await s.execute("import numpy as np\nbig = np.ones(10 * 1024**3 // 8)")
        assert not r.success and r.error_message.startswith("MemoryError")
        assert "memory limit" in r.error_message and "1024 MB" in r.error_message
        assert (await s.execute("keep")).result == "5"
    finally:
        await s.close()


async def test_fork_flood_is_capped_and_cleaned_up(pool: WorkerPool) -> None:
    s, neighbour = await pool.open_session(), await pool.open_session()
    try:
        code = (
            "import os, time\nstarted = 0\nfor _ in range(300):\n    pid = os.fork()\n    if pid == 0:\n"
            "        time.sleep(60)\n        os._exit(0)\n    started += 1\n"
        )
        r = await s.execute(code)
        assert not r.success and "process limit reached: at most 16" in r.error_message
        assert 0 < int((await s.execute("started")).result) < 16
        # the children it left were killed after the call: only the two workers remain
        assert sorted(uid_processes(pool)) == processes_of(s, neighbour)
        assert (await neighbour.execute("6 * 7")).result == "42"
    finally:
        await s.close()
        await neighbour.close()
    assert uid_processes(pool) == []


async def test_writes_outside_the_private_working_directory_are_refused(pool: WorkerPool) -> None:
    s = await pool.open_session()
    workdir = s.workdir
    try:
        r = await s.execute("open('/work/ngym-escape.txt', 'w')")
        assert not r.success and "PermissionError" in r.error_message
        assert "only be written inside the working directory" in r.error_message
        r = await s.execute("open('/etc/passwd', 'a')")
        assert not r.success and "PermissionError" in r.error_message
        code = "import os\nwith open('notes.txt', 'w') as f:\n    f.write('ok')\nos.getcwd(), os.listdir('.')"
        r = await s.execute(code)
        assert r.success and r.result == f"({workdir!r}, ['notes.txt'])"
        if pool.enforcement.get("mount_namespace"):
            r = await s.execute("open('/tmp/ngym-escape.txt', 'w')")
            assert not r.success and "PermissionError" in r.error_message
            r = await s.execute("open('x' * 10, 'wb').write(b'0' * (32 * 1024 * 1024))")  # disk_mb is 16
            assert not r.success and "disk limit" in r.error_message
        assert not Path("/work/ngym-escape.txt").exists() and not Path("/tmp/ngym-escape.txt").exists()
    finally:
        await s.close()
    assert not Path(workdir).exists()


async def test_network_is_unavailable(pool: WorkerPool) -> None:
    s = await pool.open_session()
    try:
        r = await s.execute("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_STREAM)")
        assert not r.success and "network access is disabled" in r.error_message
        r = await s.execute("import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)")
        assert not r.success and "network access is disabled" in r.error_message
        if pool.enforcement.get("network_namespace"):
            # the audit hook is a courtesy; the boundary is the namespace: only a loopback interface exists
            r = await s.execute("sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:])")
            assert r.result == "['lo']"
    finally:
        await s.close()


async def test_huge_output_is_truncated_with_a_marker(pool: WorkerPool) -> None:
    s = await pool.open_session()
    try:
        r = await s.execute("print('x' * 100_000_000)\n'y' * 10_000_000")
        assert r.success
        assert r.stdout.startswith("x" * 4096) and "[... output truncated: 99995905 more characters" in r.stdout
        assert len(r.stdout) < 4096 + 200 and len(r.result) < 4096 + 200
        assert "output truncated" in r.result
    finally:
        await s.close()


async def test_cap_on_concurrent_workers() -> None:
    small = WorkerPool(LIMITS, max_workers=2, preload=[])
    await small.start()
    try:
        a, b = await small.open_session(), await small.open_session()
        with pytest.raises(PoolExhausted) as info:
            await small.open_session()
        assert info.value.retry_after > 0 and "all 2 Python workers are in use" in str(info.value)
        await a.close()
        c = await small.open_session()
        assert (await c.execute("1 + 1")).result == "2"
        await b.close()
        await c.close()
    finally:
        await small.shutdown()


async def test_shutdown_reaps_every_process_even_mid_call() -> None:
    small = WorkerPool(LIMITS, max_workers=4, preload=[])
    await small.start()
    zygote = small.zygote_pid
    work_root = small.work_root
    sessions = [await small.open_session() for _ in range(3)]
    for s in sessions:
        await s.execute("x = 1")
    busy = asyncio.ensure_future(sessions[0].execute("import time\ntime.sleep(30)"))
    await asyncio.sleep(0.2)
    assert len(uid_processes(small)) == 6 and len(children_of(zygote)) == 3
    await small.shutdown()
    assert (await busy).success is False
    assert uid_processes(small) == []
    assert not Path(f"/proc/{zygote}").exists()
    assert not Path(work_root).exists()


async def test_cpu_time_limit_retires_the_worker() -> None:
    small = WorkerPool(SandboxLimits(wall_time_s=10, cpu_time_s=1), max_workers=1, preload=[])
    await small.start()
    try:
        s = await small.open_session()
        await s.execute("x = 1")
        r = await s.execute("while True: pass")
        assert not r.success and r.state_lost and r.error_message.startswith("CpuTimeLimitExceeded")
        assert "at most 1 CPU seconds" in r.error_message and "variables are lost" in r.error_message
        assert "NameError" in (await s.execute("x")).error_message
        await s.close()
    finally:
        await small.shutdown()


SERVER_SCRIPT = """
import asyncio, json, sys
from math_with_code.sandbox import SandboxLimits, WorkerPool

async def main():
    pool = WorkerPool(SandboxLimits(wall_time_s=60), max_workers=2, preload=[])
    await pool.start()
    s = await pool.open_session()
    print(json.dumps({"uid_base": pool.uid_base, "zygote": pool.zygote_pid, "work_root": pool.work_root}), flush=True)
    await s.execute("import subprocess, time\\np = subprocess.Popen(['sleep', '300'])\\ntime.sleep(60)")

asyncio.run(main())
"""


def range_processes(uid_base: int, size: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                line = next(x for x in Path(entry.path, "status").read_text().splitlines() if x.startswith("Uid:"))
            except (OSError, StopIteration):
                continue
            if uid_base <= int(line.split()[1]) < uid_base + size:
                found.append(int(entry.name))
    return found


async def test_a_server_killed_by_sigkill_leaves_no_process_behind() -> None:
    """The server dies mid-call while user code has a background child: the forkserver gets SIGTERM (its
    parent-death signal) and kills every slot, the background child included, and removes its work root."""
    import json
    import signal
    import subprocess
    import sys
    import time

    server = subprocess.Popen([sys.executable, "-c", SERVER_SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(server.stdout.readline())
        deadline = time.monotonic() + 20
        while len(range_processes(info["uid_base"], 2)) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the worker's two processes and its background `sleep 300`
        assert len(range_processes(info["uid_base"], 2)) == 3
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    deadline = time.monotonic() + 10
    while (range_processes(info["uid_base"], 2) or Path(f"/proc/{info['zygote']}").exists()) and (
        time.monotonic() < deadline
    ):
        await asyncio.sleep(0.05)
    assert range_processes(info["uid_base"], 2) == []
    assert not Path(f"/proc/{info['zygote']}").exists()
    assert not Path(info["work_root"]).exists()


async def test_a_restarted_forkserver_kills_what_a_killed_one_left_behind() -> None:
    """SIGKILL of the forkserver itself: its workers die with it, but a background child of a running call is
    orphaned. The forkserver started next (on the next request) kills it before forking anything."""
    small = WorkerPool(LIMITS, max_workers=2, preload=[])
    await small.start()
    try:
        s = await small.open_session()
        busy = asyncio.ensure_future(
            s.execute("import subprocess, time\np = subprocess.Popen(['sleep', '300'])\ntime.sleep(1.5)")
        )
        for _ in range(100):
            await asyncio.sleep(0.02)
            if len(uid_processes(small)) == 3:
                break
        os.kill(small.zygote_pid, 9)
        r = await busy
        assert not r.success and r.state_lost and "lost" in r.error_message
        assert (await s.execute("1 + 1")).result == "2"  # a new forkserver and worker
        assert sorted(uid_processes(small)) == processes_of(s)
        await s.close()
        assert uid_processes(small) == []
    finally:
        await small.shutdown()


async def test_a_new_pool_kills_what_a_pool_killed_outright_left_in_its_uid_range() -> None:
    """Server and forkserver both SIGKILLed at once (nothing could clean up): the orphaned background child keeps
    running as a worker uid. The next pool that claims that uid range kills it at start-up."""
    import json
    import signal
    import subprocess
    import sys
    import time

    server = subprocess.Popen([sys.executable, "-c", SERVER_SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(server.stdout.readline())
        deadline = time.monotonic() + 20
        while len(range_processes(info["uid_base"], 2)) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        os.kill(info["zygote"], signal.SIGKILL)
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    await asyncio.sleep(0.3)
    orphans = range_processes(info["uid_base"], 2)
    try:
        assert orphans  # at least the `sleep 300` (the worker dies with its forkserver)
        assert Path(info["work_root"]).exists()  # abandoned: nobody could remove it
        groups = list(Path("/sys/fs/cgroup").glob(f"**/ngym-mwc-{info['zygote']}"))
        pool = WorkerPool(LIMITS, max_workers=2, uid_base=info["uid_base"], preload=[])
        assert pool.uid_base == info["uid_base"]
        await pool.start()
        try:
            assert range_processes(info["uid_base"], 2) == []
            assert not Path(info["work_root"]).exists()  # swept: its lock was free
            assert not [g for g in groups if g.exists()]  # its cgroups too
        finally:
            await pool.shutdown()
    finally:
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def test_oversized_code_is_refused_without_running_and_state_is_kept() -> None:
    small = WorkerPool(SandboxLimits(max_code_chars=1000), max_workers=1, preload=[])
    await small.start()
    try:
        s = await small.open_session()
        await s.execute("x = 7")
        pid = s.pid
        r = await s.execute("y = 1  # " + "a" * 2000)
        assert not r.success and not r.state_lost
        assert r.error_message.startswith("the code is 2009 characters long; the limit is 1000 characters")
        assert (await s.execute("x")).result == "7" and s.pid == pid
        await s.close()
    finally:
        await small.shutdown()


async def test_a_cancelled_call_does_not_leak_its_reply_into_the_next_call(pool: WorkerPool) -> None:
    s = await pool.open_session()
    try:
        busy = asyncio.ensure_future(
            s.execute("import subprocess, time\np = subprocess.Popen(['sleep', '300'])\ntime.sleep(1)\n'stale'")
        )
        await asyncio.sleep(0.3)
        busy.cancel()
        with pytest.raises(asyncio.CancelledError):
            await busy
        r = await s.execute("'fresh'")
        assert (r.success, r.result) == (True, "fresh")
        await asyncio.sleep(1.2)  # past the point where the old worker would have answered
        assert (await s.execute("1 + 1")).result == "2"
        assert sorted(uid_processes(pool)) == processes_of(s)  # the cancelled call's worker and its child are gone
    finally:
        await s.close()


async def test_two_pools_get_their_own_work_roots_and_a_shared_one_is_refused(tmp_path: Path) -> None:
    a = WorkerPool(LIMITS, max_workers=1, preload=[])
    b = WorkerPool(LIMITS, max_workers=1, preload=[], work_root=str(tmp_path / "shared"))
    assert a.work_root != b.work_root
    c = WorkerPool(LIMITS, max_workers=1, preload=[], work_root=str(tmp_path / "shared"))
    await a.start()
    await b.start()
    try:
        with pytest.raises(SandboxError, match="is in use by another forkserver"):
            await c.start()
        s = await a.open_session()
        assert (await s.execute("1 + 1")).result == "2"
        await s.close()
    finally:
        await c.shutdown()
        await b.shutdown()
        await a.shutdown()
    assert not Path(a.work_root).exists() and not Path(b.work_root).exists()
