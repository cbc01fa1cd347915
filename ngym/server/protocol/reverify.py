"""``GET /reverify_mode``'s values."""

from __future__ import annotations

from enum import Enum


class ReverifyMode(str, Enum):
    """Values of ``GET /reverify_mode``: whether re-running verify on a stored response is meaningful."""

    STATELESS = "stateless"
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"
