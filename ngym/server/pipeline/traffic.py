"""Per-process request counters that ``/health`` reports, so ``ngym status`` can show rollouts/s and errors.

Counted once per HTTP response of a session route (``/health`` and the other read-only routes are not): every
response (``requests``), every finished ``/verify`` with status 200 (``verified``: one per rollout) and every
response with status 500 or more (``server_errors``). Plain integers in one process: a rate is the difference of
two readings over the time between them. With ``--workers N`` each worker counts its own requests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Traffic:
    """Counters since the process started."""

    requests: int = 0
    verified: int = 0
    server_errors: int = 0

    def count(self, path: str, status: int) -> None:
        self.requests += 1
        if status >= 500:
            self.server_errors += 1
        elif path == "/verify" and status == 200:
            self.verified += 1

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
