"""Request counters that ``/health`` reports, so ``ngym status`` can show rollouts/s and errors.

Counted once per HTTP response of a session route (``/health`` and the other read-only routes are not): every
response (``requests``), every finished ``/verify`` with status 200 (``verified``: one per rollout) and every
response with status 500 or more (``server_errors``). A rate is the difference of two readings over the time
between them.

One process counts in plain integers. uvicorn's workers (``ngym run NAME --workers N`` with sessions in Redis)
share one listening socket, so a ``GET /health`` reaches whichever worker accepts it: counted per process, a reading
was one worker's share, and a rate between two readings compared two workers. There the supervisor makes a small
file of counters (``TRAFFIC_FILE_ENV``); each worker takes a slot of its own (a lock on the slot's bytes, released
when the worker dies, so a worker uvicorn starts again carries on the dead one's counts) and writes only there, and
every worker's ``/health`` reports the sum of all slots. (``--workers N`` behind HAProxy reads each worker's
``/health`` in turn and sums them: ``ngym status``.)
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from pathlib import Path
from typing import Any

#: The counters' file of a set of uvicorn workers (set by the supervisor for its workers).
TRAFFIC_FILE_ENV = "NGYM_TRAFFIC_FILE"
FIELDS = ("requests", "verified", "server_errors")
#: Slots in the file: workers, and the workers uvicorn starts again in their place, each take a free one.
SLOTS = 256
_SLOT = ctypes.c_int64 * len(FIELDS)
SLOT_BYTES = ctypes.sizeof(_SLOT)


def make_traffic_file(path: Path) -> None:
    """An empty counters file for a set of workers (every slot zero)."""
    path.write_bytes(bytes(SLOTS * SLOT_BYTES))


class Traffic:
    """Counters since the server started: this process's, or (``shared``) the sum of its set of workers'."""

    def __init__(self, shared: Path | None = None) -> None:
        self._mine: Any = _SLOT()
        self._slots: list[Any] = []
        self._keep: tuple[Any, ...] = ()
        if shared is not None:
            self._attach(shared)

    @classmethod
    def for_this_process(cls) -> Traffic:
        """Shared when the supervisor gave this worker a counters file, else this process's own."""
        path = os.environ.get(TRAFFIC_FILE_ENV)
        return cls(Path(path)) if path else cls()

    def _attach(self, path: Path) -> None:
        handle = os.open(path, os.O_RDWR)
        try:
            memory = mmap.mmap(handle, SLOTS * SLOT_BYTES)
        except (OSError, ValueError):
            os.close(handle)
            return  # not a counters file: count in this process, as without one
        slots = [_SLOT.from_buffer(memory, index * SLOT_BYTES) for index in range(SLOTS)]
        for index in range(SLOTS):
            try:  # the slot is this process's while it lives; the kernel frees the lock when it dies
                fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB, SLOT_BYTES, index * SLOT_BYTES)
            except OSError:
                continue
            self._mine, self._slots, self._keep = slots[index], slots, (handle, memory)
            return
        del slots  # every slot taken: count in this process (the views must go before the map can close)
        memory.close()
        os.close(handle)

    @property
    def requests(self) -> int:
        return self.as_dict()["requests"]

    @property
    def verified(self) -> int:
        return self.as_dict()["verified"]

    @property
    def server_errors(self) -> int:
        return self.as_dict()["server_errors"]

    def count(self, path: str, status: int) -> None:
        mine = self._mine  # only this process writes its slot: no lock needed
        mine[0] += 1
        if status >= 500:
            mine[2] += 1
        elif path == "/verify" and status == 200:
            mine[1] += 1

    def as_dict(self) -> dict[str, int]:
        slots = self._slots or [self._mine]
        return {name: sum(int(slot[index]) for slot in slots) for index, name in enumerate(FIELDS)}
