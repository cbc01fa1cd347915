"""Which OpenEnv server a new episode goes to, and waiting for a free one.

An OpenEnv server runs at most ``max_concurrent_envs`` episodes at once (1 unless the environment declares
``SUPPORTS_CONCURRENT_SESSIONS``). ngym counts the live episodes it opened on each server it fronts (one per
``instances`` it started, or the one given by URL); a seed takes a free slot on the least busy server, or waits
for one until its deadline. Closing an episode (the session's close, or the idle sweep of an abandoned one)
gives its slot back and wakes one waiting seed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ngym_openenv import launch


@dataclass(eq=False)
class Backend:
    """One OpenEnv server: where it listens, what it allows, how many episodes ngym holds on it now."""

    url: str
    uds: str | None = None  #: its unix socket, for a server ngym started
    capacity: int | None = None  #: its ``max_concurrent_envs`` (None: not known, so not counted against)
    process: launch.OpenEnvProcess | None = None
    live: int = 0

    @property
    def free(self) -> bool:
        return self.capacity is None or self.live < self.capacity


class Pool:
    """OpenEnv servers and the episodes ngym holds on each; ``acquire`` a slot, ``release`` it when it ends."""

    def __init__(self, backends: list[Backend]) -> None:
        if not backends:
            raise ValueError("a pool needs at least one OpenEnv server")
        self.backends = backends
        self.waiting = 0  #: seeds waiting for a slot now
        self._changed = asyncio.Condition()

    @property
    def capacity(self) -> int | None:
        """Episodes all servers allow at once (None when one of them does not say)."""
        limits = [b.capacity for b in self.backends]
        return None if any(c is None for c in limits) else sum(c for c in limits if c is not None)

    @property
    def live(self) -> int:
        return sum(b.live for b in self.backends)

    async def acquire(self, deadline: float) -> Backend | None:
        """A slot on the least busy server with one free, waiting until ``deadline`` (the loop's clock) at most;
        None if none came free by then."""
        loop = asyncio.get_running_loop()
        async with self._changed:
            while True:
                free = [b for b in self.backends if b.free]
                if free:
                    chosen = min(free, key=lambda b: b.live)
                    chosen.live += 1
                    return chosen
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                self.waiting += 1
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=remaining)
                except TimeoutError:
                    return None
                finally:
                    self.waiting -= 1

    async def release(self, backend: Backend) -> None:
        """Give one slot of ``backend`` back (its episode ended) and wake the seeds waiting for one."""
        async with self._changed:
            backend.live = max(0, backend.live - 1)
            self._changed.notify_all()
