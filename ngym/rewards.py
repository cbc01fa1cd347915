"""The one rule for what a reward may be: a number inside the environment's ``reward_range``.

A server class declares ``reward_range`` (``(0.0, 1.0)`` by default; ``None`` for rewards at the environment's own
scale) and ``GET /health`` reports it, so ``ngym validate`` (in-process), ``ngym rollout`` and ``ngym profile``
(over HTTP, against a server they started or one given by URL) check every ``/verify`` answer the same way. A
reward outside the range (a match count of 2.0 or 3.0 where a fraction was meant) is a failed rollout, counted
and named, never part of a mean.
"""

from __future__ import annotations

import math
from typing import Any

#: the key of ``GET /health`` that carries the server's ``reward_range`` (a ``[low, high]`` list, or null)
HEALTH_KEY = "reward_range"

Bounds = tuple[float, float]


def reward_problem(reward: Any, bounds: Bounds | None) -> str | None:
    """Why ``reward`` is no reward (not a number, or outside ``bounds``), else None."""
    if isinstance(reward, bool) or not isinstance(reward, int | float) or math.isnan(reward):
        return f"reward {reward!r} is not a number"
    if bounds is not None and not bounds[0] <= reward <= bounds[1]:
        return f"reward {reward!r} is not a number in [{bounds[0]:g}, {bounds[1]:g}]"
    return None


def out_of_range_failure(reward: Any, bounds: Bounds | None) -> str | None:
    """The failure line ``rollout`` and ``profile`` report for a reward the rule refuses, else None."""
    problem = reward_problem(reward, bounds)
    if problem is None:
        return None
    where = f" (the environment's reward_range is [{bounds[0]:g}, {bounds[1]:g}])" if bounds is not None else ""
    return f"/verify answered {problem}{where}: a verify bug, not a score; left out of the mean"


def bounds_from_health(health: dict[str, Any] | None) -> Bounds | None:
    """The ``reward_range`` a server's ``/health`` reports (None: not reported, or rewards at any scale)."""
    value = (health or {}).get(HEALTH_KEY)
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return float(value[0]), float(value[1])
    return None


__all__ = ["HEALTH_KEY", "Bounds", "bounds_from_health", "out_of_range_failure", "reward_problem"]
