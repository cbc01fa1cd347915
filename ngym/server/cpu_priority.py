"""CPU priority of the serving process and of the processes its environment starts.

Environments that verify in other processes (a process forked per ``/verify``, a sandbox per session, Ray tasks)
put CPU-bound work on the same cores as the event loop that answers every other rollout. Two settings decide who
waits when the cores are busy; both are applied once per serving process, before the environment is built.

* **Ray's workers at the server's level** (``RAY_worker_niceness``, default here ``0``). Ray starts its worker
  processes 15 nice levels below the raylet by default, so that a busy node keeps its raylet responsive. An
  environment whose verify is a Ray task (NeMo Gym's ``code_gen``: ``check_correctness_remote.remote(...)``)
  then has its unit tests run at nice 15: on a node where anything else runs, they wait behind all of it, and
  every rollout waits for them. ngym sets ``RAY_worker_niceness=0`` (Ray's own job supervisor does the same) when
  it is not already set, so the local Ray that the environment starts runs its tasks at the level of the server
  that asked for them. A worker that runs sooner can only finish its wall-clock timeouts later, never sooner.
  It affects only a Ray started by this process (an existing cluster keeps its own setting). Set
  ``RAY_worker_niceness=15`` to keep Ray's default.
* **The serving process above its children, if asked** (``NGYM_SERVER_PRIORITY=N``, default 0: off). The server
  raises itself N nice levels (this needs root or ``CAP_SYS_NICE``; without it, a log line and nothing else)
  and the processes it forks from Python (``multiprocessing``, ``os.fork``) go back to the level the server
  had, so its children run exactly where they ran before while the event loop is scheduled first. A local Ray
  gets ``RAY_worker_niceness=N`` so its workers also land where they were. Processes started with ``subprocess``
  (forked in C, no Python hook runs) inherit the raised level.

Nothing here changes what any process computes; only which runnable process a busy core picks first.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger("ngym.server")

RAY_WORKER_NICENESS_ENV = "RAY_worker_niceness"
SERVER_PRIORITY_ENV = "NGYM_SERVER_PRIORITY"
#: Ray's worker niceness when the user has not chosen one: the server's own level (Ray's default is 15).
DEFAULT_RAY_WORKER_NICENESS = 0

_applied_in: set[int] = set()


def server_priority() -> int:
    """How many nice levels the serving process raises itself (``NGYM_SERVER_PRIORITY``; 0 = not at all)."""
    value = os.environ.get(SERVER_PRIORITY_ENV, "").strip()
    try:
        return max(0, min(20, int(value))) if value else 0
    except ValueError:
        log.warning("%s=%r is not an integer; the server's priority is left alone", SERVER_PRIORITY_ENV, value)
        return 0


def _set_all_threads(nice: int) -> None:
    """Set the nice value of every thread of this process (on Linux a nice value belongs to a thread)."""
    tasks = Path("/proc/self/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.setpriority(os.PRIO_PROCESS, tid, nice)


def raise_server(levels: int) -> bool:
    """Raise this process ``levels`` nice levels; its Python-forked children go back to the level it had.

    False (and nothing changed) when ``levels`` is 0 or the process may not raise itself.
    """
    if levels <= 0:
        return False
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        _set_all_threads(base - levels)
    except PermissionError:
        log.info(
            "%s=%d: not permitted to raise the server's priority (needs CAP_SYS_NICE); left alone",
            SERVER_PRIORITY_ENV,
            levels,
        )
        return False
    server_pid = os.getpid()

    def after_in_child() -> None:
        if os.getppid() == server_pid:  # hooks are inherited: a grandchild is already at the base level
            with contextlib.suppress(OSError):  # never a reason for the child to fail
                os.setpriority(os.PRIO_PROCESS, 0, base)

    os.register_at_fork(after_in_child=after_in_child)
    return True


def apply_cpu_priorities() -> None:
    """Set both (once per process): Ray's worker niceness unless the user chose one, and the server's priority
    if ``NGYM_SERVER_PRIORITY`` asks for it. Called before the environment is built (it may start Ray)."""
    if os.getpid() in _applied_in:
        return
    _applied_in.add(os.getpid())
    raised = raise_server(server_priority())
    # A raylet started by this process inherits its level; Ray's workers are that level plus this increment.
    ray_niceness = server_priority() if raised else DEFAULT_RAY_WORKER_NICENESS
    os.environ.setdefault(RAY_WORKER_NICENESS_ENV, str(ray_niceness))
