"""Progress for long CLI work: one status line, redrawn in place on a terminal, a plain line now and then otherwise.

Anything that can take more than a couple of seconds (pip, docker build, rollouts) runs inside a ``Ticker``:
on a terminal the line ``label: <status> (12s)`` is redrawn a few times a second and cleared at the end; in a
log (CI, a pipe, ``nohup``) a plain line is printed every ``every`` seconds (default: ``NGYM_PROGRESS_SECONDS``,
else 10), so silence never means "stuck?".
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

#: seconds between plain progress lines without a terminal (default 10)
EVERY_ENV = "NGYM_PROGRESS_SECONDS"
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class Ticker:
    """Show ``status()`` while a block runs: a spinner line on a TTY, a plain line every ``every`` s elsewhere."""

    def __init__(
        self,
        label: str,
        status: Callable[[], str] = lambda: "",
        *,
        every: float | None = None,
        stream: TextIO | None = None,
        tty: bool | None = None,
    ) -> None:
        self.label = label
        self.status = status
        self.every = every if every is not None else float(os.environ.get(EVERY_ENV, "") or 10.0)
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="ngym-progress", daemon=True)
        self._drawn = False

    def __enter__(self) -> Ticker:
        self.started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._clear()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def echo(self, line: str) -> None:
        """Print a line of its own (above the status line on a terminal)."""
        with self._lock:
            self._clear_locked()
            print(line, file=self.stream, flush=True)

    def line(self) -> str:
        status = self.status()
        return f"{self.label}: {status} ({self.elapsed:.0f}s)" if status else f"{self.label} ({self.elapsed:.0f}s)"

    def _loop(self) -> None:
        frame = 0
        period = 0.1 if self.tty else self.every
        while not self._stop.wait(period):
            with self._lock:
                if self.tty:
                    width = _columns(self.stream) - 3
                    text = self.line()[:width]
                    self.stream.write(f"\r\033[K{_SPINNER[frame % len(_SPINNER)]} {text}")
                    self.stream.flush()
                    self._drawn = True
                    frame += 1
                else:
                    print(f"  … {self.line()}", file=self.stream, flush=True)

    def _clear(self) -> None:
        with self._lock:
            self._clear_locked()

    def _clear_locked(self) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _columns(stream: TextIO) -> int:
    return shutil.get_terminal_size((80, 24)).columns
