"""Shutdown stops the session sweeper even when a store client swallows cancellations."""

from __future__ import annotations

import asyncio
import contextlib

from ngym.server.sessions.manager import _stop_task


async def test_a_task_that_swallows_cancellations_is_still_stopped() -> None:
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 3:
                    raise  # the fourth cancellation is the one that takes effect

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(_stop_task(task, wait_s=0.05), timeout=5)
    assert task.done() and swallowed == 3


async def test_a_task_that_never_stops_does_not_hang_shutdown() -> None:
    released = asyncio.Event()

    async def immortal() -> None:
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(10)

    task = asyncio.create_task(immortal())
    await asyncio.sleep(0)
    await asyncio.wait_for(_stop_task(task, attempts=3, wait_s=0.02), timeout=5)
    assert not task.done()
    released.set()  # leave nothing behind
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.done()
