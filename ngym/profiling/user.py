"""The Locust user that performs whole rollouts (importing this module imports Locust, which gevent-patches).

Each simulated user runs rollouts back to back (no think time: a training loop does not wait), taking rows
round-robin from the shared list, and carries its own session cookie by hand: the HTTP client's cookie
jar accepts nothing, and each response's ``Set-Cookie`` is copied onto the next request, as NeMo Gym's
agents do. Every request is a Locust request (named by its route, so the statistics are per endpoint);
every rollout is counted by a ``RolloutTracker``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.cookiejar import DefaultCookiePolicy
from typing import Any

from locust import FastHttpUser, constant, task

from ngym.profiling.scenario import RolloutFailed, Scenario
from ngym.rewards import Bounds, out_of_range_failure

FAILURE_CLASS_KEY = "_ng_failure_class"
_ERROR_BODY_CHARS = 160


@dataclass
class RolloutTracker:
    """Counts whole rollouts: finished, failed (any request failed), rewards and their latency."""

    finished: int = 0
    failed: int = 0
    rewards: list[float] = field(default_factory=list)
    reward_mismatches: int = 0
    #: row index → (recorded reward, the server's reward) of each row whose reward differed (the first seen)
    mismatched_rows: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: the server's ``reward_range`` (``GET /health``): a reward outside it is a failed rollout, counted here by reason
    unscorable: Counter[str] = field(default_factory=Counter)
    reward_range: Bounds | None = None
    judge_failures: int = 0
    durations_ms: list[float] = field(default_factory=list)
    failure_reasons: Counter[str] = field(default_factory=Counter)
    #: ``_ng_failure_class`` values of verify answers (reward 0.0 because a judge or service failed)
    verify_failure_classes: Counter[str] = field(default_factory=Counter)
    #: when each rollout ended, in seconds since the start (the report's rollouts/s over time)
    finished_at_s: list[float] = field(default_factory=list)
    failed_at_s: list[float] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    stopped_at: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(
        self, row: dict[str, Any], verified: dict[str, Any] | None, duration_ms: float, index: int | None = None
    ) -> None:
        """A rollout that got its verify answer (``index``: its row's, for naming the rows that differ)."""
        bad = None
        if isinstance(verified, dict) and "reward" in verified:
            bad = out_of_range_failure(verified["reward"], self.reward_range)
        if bad is not None:  # the rule ngym validate applies: no reward, and a failed rollout
            self.record_failure(f"POST /verify: {bad}")
            with self._lock:
                self.unscorable[bad] += 1
            return
        with self._lock:
            self.finished += 1
            self.durations_ms.append(duration_ms)
            self.finished_at_s.append(time.monotonic() - self.started_at)
            if not isinstance(verified, dict) or "reward" not in verified:
                return
            reward = float(verified["reward"])
            if verified.get(FAILURE_CLASS_KEY):
                # the server could not score it (a judge or service failed): no reward, not a different one
                self.judge_failures += 1
                self.verify_failure_classes[str(verified[FAILURE_CLASS_KEY])] += 1
                return
            self.rewards.append(reward)
            expected = row.get("reward") if "response" in row else None
            if expected is not None and float(expected) != reward:
                self.reward_mismatches += 1
                if index is not None:
                    self.mismatched_rows.setdefault(index, (float(expected), reward))

    def record_failure(self, reason: str) -> None:
        with self._lock:
            self.failed += 1
            self.failure_reasons[reason] += 1
            self.failed_at_s.append(time.monotonic() - self.started_at)

    def stop(self) -> None:
        self.stopped_at = time.monotonic()

    @property
    def elapsed_s(self) -> float:
        return max((self.stopped_at or time.monotonic()) - self.started_at, 1e-9)


class LocustRolloutSession:
    """A ``RolloutSession`` over a Locust ``FastHttpSession``: hand-copied cookie, every request in the stats."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.cookie: str | None = None

    def post(self, path: str, body: Any = None, name: str | None = None) -> Any:
        headers = {"cookie": self.cookie} if self.cookie else {}
        label = name or path
        try:
            with self.client.post(
                path, json=body if body is not None else {}, headers=headers, name=label, catch_response=True
            ) as response:
                set_cookie = response.headers.get("set-cookie") if response.headers else None
                if set_cookie:
                    self.cookie = set_cookie.split(";", 1)[0]
                status = response.status_code or 0
                if status == 0 or status >= 400:
                    reason = describe_failure(status, response.text, response.error)
                    response.failure(reason)
                    raise RolloutFailed(f"POST {label}: {reason}")
                try:
                    data = response.json()
                except ValueError:
                    response.failure(f"HTTP {status}: body is not JSON")
                    raise RolloutFailed(f"POST {label}: HTTP {status}: body is not JSON") from None
                response.success()
                return data
        except RolloutFailed:
            raise
        except Exception as exc:  # a transport error the client raised instead of recording
            raise RolloutFailed(f"POST {label}: {exc!r}") from exc


def describe_failure(status: int, text: str | None, error: Any = None) -> str:
    """A stable one-line reason for a failed request (so Locust groups identical failures together)."""
    if status == 0:
        return f"connection error: {error!r}" if error is not None else "connection error"
    body = " ".join((text or "").split())
    if len(body) > _ERROR_BODY_CHARS:
        body = body[: _ERROR_BODY_CHARS - 1] + "…"
    return f"HTTP {status}: {body}" if body else f"HTTP {status}"


class RolloutUser(FastHttpUser):
    """Runs whole rollouts back to back. Configure with ``rollout_user_class`` (the attributes are per run)."""

    abstract = True
    wait_time = constant(0)
    network_timeout = 60.0
    connection_timeout = 10.0

    scenario: Scenario
    rows: list[dict[str, Any]]
    tracker: RolloutTracker
    row_counter: itertools.count[int]

    def on_start(self) -> None:
        # No cookie jar: each rollout carries its own cookie by hand (LocustRolloutSession).
        self.client.cookiejar.set_policy(DefaultCookiePolicy(allowed_domains=[]))

    @task
    def rollout(self) -> None:
        index = next(self.row_counter) % len(self.rows)
        row = self.rows[index]
        session = LocustRolloutSession(self.client)
        started = time.perf_counter()
        try:
            verified = self.scenario.run(session, row)
        except RolloutFailed as exc:
            self.tracker.record_failure(str(exc))
            return
        self.tracker.record(row, verified, (time.perf_counter() - started) * 1000, index)


def rollout_user_class(
    scenario: Scenario, rows: list[dict[str, Any]], host: str, tracker: RolloutTracker | None = None
) -> type[RolloutUser]:
    """A concrete user class for one load run (its own tracker, rows and scenario)."""
    attrs = {
        "abstract": False,
        "host": host,
        "scenario": scenario,
        "rows": rows,
        "tracker": tracker or RolloutTracker(),
        "row_counter": itertools.count(),
    }
    return type("RolloutUser", (RolloutUser,), attrs)
