"""CPU priority of the serving process and of the processes its environment starts.

Environments that verify in other processes (a process forked per ``/verify``, a sandbox per session, Ray tasks)
put CPU-bound work on the same cores as the event loop that answers every other rollout. Which of them waits when
the cores are busy: Linux schedules by *autogroup* (one per session, when
``/proc/sys/kernel/sched_autogroup_enabled`` is 1) or by cpu cgroup (a container), then by nice value within it:
the server and the children it forks share one group's CPU, and within it a busy child is as entitled to a core
as the event loop. The group's share against the rest of the machine does not depend on the nice values inside.

* **The serving process above its children, if asked** (``NGYM_SERVER_PRIORITY=N``, default 0: off). The server
  raises itself N nice levels (this needs root or ``CAP_SYS_NICE``; without it, a log line and nothing else)
  and the processes it forks from Python (``multiprocessing``, ``os.fork``) go back to the level the server
  had, so its children run at the level they ran at before while the event loop is scheduled first. Processes
  started with ``subprocess`` (forked in C, no Python hook runs: a local Ray's raylet, for one) inherit the
  raised level (Ray still starts its workers 15 levels below its raylet). Off by default: a child's wall-clock
  timeout (math_with_judge's 10 s, which scores 0.0) is measured while the server's own work now goes first, so
  it could fire sooner by the CPU the server takes. What it buys (docs/performance.md): under math_with_judge,
  ``NGYM_SERVER_PRIORITY=15`` took ``/health`` from p50 361 / p99 1,573 ms to 35 / 713 ms; +5 did nothing
  measurable (a weight of 3,121 against 16 busy children of 1,024 each).

Nothing here changes what any process computes; only which runnable process a busy core picks first.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger("ngym.server")

SERVER_PRIORITY_ENV = "NGYM_SERVER_PRIORITY"

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
    """Raise the serving process if ``NGYM_SERVER_PRIORITY`` asks for it (once per process). Called before the
    environment is built, so that the threads and processes it starts are covered."""
    if os.getpid() in _applied_in:
        return
    _applied_in.add(os.getpid())
    raise_server(server_priority())
