"""A least-recently-used cache bounded by the bytes its entries hold, not by their number.

An entry-counted cache of model-influenced values can hold entries × the largest value: 4,096 parsed calls of
20 MB each was a way to exhaust the server's memory. Here each entry is stored with its size, the total stays
under ``max_bytes`` (oldest entries evicted first) and an entry larger than ``max_entry_bytes`` is not kept.

Written out rather than taken from ``cachetools`` (whose ``LRUCache(getsizeof=...)`` does the same): the
WorkBench reference check runs this package under a separate pandas-2 interpreter that has no third-party
packages besides pandas.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByteBoundedLRU(Generic[K, V]):
    """``get``/``put`` with the size of each value given by the caller; thread-safe."""

    def __init__(self, max_bytes: int, max_entry_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.bytes = 0
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()  # verify may run in worker threads

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep ``value`` (``size`` bytes) unless it is larger than ``max_entry_bytes``."""
        if size > self.max_entry_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self.bytes -= evicted

    def sizes(self) -> list[int]:
        """The size of every entry (for tests and diagnostics)."""
        with self._lock:
            return [size for _, size in self._entries.values()]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0
