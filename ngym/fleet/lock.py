"""One ``ngym up`` of a fleet at a time: an exclusive lock on a file beside the fleet's state.

``ngym up`` takes the lock before any work (a virtualenv, a port) and holds it until it returns; a second
``up`` of the same fleet fails at once with one line naming the first one's pid. ``ngym down`` asks a running
``up`` to stop (SIGTERM: it stops what it started so far) and waits for its lock before stopping the rest. The
kernel drops the lock when its holder dies, however it dies (``kill -9``): a stale lock never blocks anything.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from ngym.errors import NgymError

LOCK_FILE = "up.lock"


class FleetBusy(NgymError):
    """Another ``ngym up`` of this fleet holds its lock."""


def lock_path(state_dir: Path) -> Path:
    return state_dir / LOCK_FILE


def holder(state_dir: Path) -> int | None:
    """The pid of the ``ngym up`` holding the fleet's lock, or None when nobody holds it."""
    path = lock_path(state_dir)
    if not path.is_file():
        return None
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


@contextlib.contextmanager
def up_lock(state_dir: Path, fleet: str) -> Iterator[None]:
    """Hold the fleet's lock for the block; ``FleetBusy`` naming the holder's pid when another ``up`` has it."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(lock_path(state_dir), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            pid = f"pid {text}" if text.isdigit() else "another process"
            raise FleetBusy(
                f"fleet {fleet!r} is being brought up by another `ngym up` ({pid}); wait for it, or `ngym down` it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def stop_running_up(state_dir: Path, timeout: float = 60.0) -> int | None:
    """Ask the ``ngym up`` holding the lock (if any) to stop, and wait until it let go of the lock (it stops
    what it started first); its pid, or None when no ``up`` was running."""
    pid = holder(state_dir)
    if pid is None:
        return None
    if pid > 0:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    fd = os.open(lock_path(state_dir), os.O_RDWR)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return pid
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NgymError(f"the running `ngym up` (pid {pid}) did not stop within {timeout:.0f} s") from None
                time.sleep(0.1)
    finally:
        os.close(fd)
