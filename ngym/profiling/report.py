"""A load run's result as plain data, its terminal summary, its JSON, and the failure gate.

Nothing here imports Locust: ``ngym.profiling.runner`` turns Locust's statistics into a ``ProfileResult``.

How failures count:
- A **request fails** when its answer is not 2xx (a 5xx from ``/verify`` included), its body is not JSON, or
  the connection fails. It is a failure in Locust's statistics, under its endpoint, with a one-line reason.
- A **rollout fails** when any of its requests failed; the rest of it is skipped (``/close_session`` is still
  sent once the session was seeded). The failure ratio that ``--max-fail-ratio`` gates is
  failed rollouts / (finished + failed rollouts): the stricter figure, since a rollout makes several requests.
- A verify that answers 200 with ``reward: 0.0`` is **not** a failure: it is the environment's judgement.
  Rewards are summarised (the mean reward; rewards that differ from the recorded example's, by row), but never
  counted as failures. A verify the server could not score (``_ng_failure_class``: a judge or service failed)
  is a judge failure: no reward, left out of the mean, and not a "differs from the recording".
- A verify whose reward is outside the server's ``reward_range`` (``GET /health``; ``ngym.rewards``, the rule
  ``ngym validate`` applies) is a **failed rollout**: a verify bug is not a score.

A reward that differs from the recording while the server answered normally means the server gives another reward
for the same trajectory: the recording may be stale (or the verify changed). The summary names those rows; the exit
code stays 0 for them, since nothing failed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ngym.errors import NgymError


class ProfileFailed(NgymError):
    """The load run's failure ratio exceeded ``--max-fail-ratio`` (or no rollout finished)."""

    exit_code = 1


@dataclass
class EndpointStats:
    """One endpoint's (or the aggregate's) request statistics; times in milliseconds."""

    method: str
    name: str
    requests: int
    failures: int
    requests_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    avg_ms: float
    max_ms: float

    @property
    def label(self) -> str:
        return f"{self.method} {self.name}".strip()


@dataclass
class ErrorCount:
    """A distinct failure reason and how often it happened."""

    endpoint: str
    error: str
    count: int


@dataclass
class ProfileResult:
    """Everything one load run measured."""

    target: str
    environment: str | None
    users: int
    spawn_rate: float
    duration_s: float
    rollouts_finished: int
    rollouts_failed: int
    rollout_p50_ms: float
    rollout_p95_ms: float
    rollout_p99_ms: float
    mean_reward: float | None
    reward_mismatches: int
    judge_failures: int
    endpoints: list[EndpointStats]
    total: EndpointStats
    errors: list[ErrorCount]
    max_fail_ratio: float
    load_generator_cpu_warning: bool = False
    load_generator_cpu_percent: float = 0.0  # the Locust process's mean CPU use over the run (100 = one core)
    #: row index (as text) → [recorded reward, the server's reward] of each row whose reward differed
    mismatched_rows: dict[str, list[float]] = field(default_factory=dict)
    reports: dict[str, str] = field(default_factory=dict)
    #: live sessions on the server after the run less before it (``/health``; None when not known). Up to one per
    #: user is a rollout cut off by the stop; more is sessions the finished rollouts left open: a leak.
    sessions_left_live: int | None = None

    @property
    def rollouts_per_s(self) -> float:
        return self.rollouts_finished / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def rollouts_attempted(self) -> int:
        return self.rollouts_finished + self.rollouts_failed

    @property
    def failure_ratio(self) -> float:
        """Failed rollouts / rollouts attempted (1.0 when none was attempted)."""
        attempted = self.rollouts_attempted
        return self.rollouts_failed / attempted if attempted else 1.0

    @property
    def leaked_sessions(self) -> int:
        """Sessions left live beyond the one per user a stop may cut off (0: none leaked, or not known)."""
        return max(0, (self.sessions_left_live or 0) - self.users)

    @property
    def passed(self) -> bool:
        return self.rollouts_finished > 0 and self.failure_ratio <= self.max_fail_ratio and not self.leaked_sessions

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["total"]["label"] = self.total.label
        for endpoint, source in zip(data["endpoints"], self.endpoints, strict=True):
            endpoint["label"] = source.label
        data.update(
            rollouts_per_s=round(self.rollouts_per_s, 3),
            failure_ratio=round(self.failure_ratio, 6),
            leaked_sessions=self.leaked_sessions,
            passed=self.passed,
        )
        return data


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` percentile (nearest rank) of ``values``; 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(fraction * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def failure_message(result: ProfileResult) -> str:
    """One line naming why the run failed the gate (for the CLI's error line)."""
    if result.rollouts_attempted == 0:
        return f"no rollout finished against {result.target} in {result.duration_s:.1f}s"
    if result.leaked_sessions and result.failure_ratio <= result.max_fail_ratio:
        return leak_line(result)
    head = (
        f"failure ratio {result.failure_ratio:.1%} > --max-fail-ratio {result.max_fail_ratio:.1%}: "
        f"{result.rollouts_failed} of {result.rollouts_attempted} rollouts failed"
    )
    if result.errors:
        top = result.errors[0]
        head += f"; most common: {top.endpoint}: {top.error} ({top.count}×)"
    elif result.rollouts_finished == 0:
        head += "; no rollout finished"
    return head


def check(result: ProfileResult) -> None:
    """Raise ``ProfileFailed`` (exit code 1) naming the failure when the run did not pass the gate."""
    if not result.passed:
        raise ProfileFailed(failure_message(result))


def leak_line(result: ProfileResult) -> str:
    return (
        f"{result.sessions_left_live} sessions left live on the server after {result.rollouts_attempted} rollouts "
        f"by {result.users} users: finished rollouts do not end their sessions (each stays until the idle TTL, "
        "and a server that reaches max_sessions refuses new ones)"
    )


def _ms(value: float) -> str:
    """Milliseconds with one decimal everywhere, so a column never mixes ``9.0`` and ``11``."""
    return f"{value:.1f}"


def render_summary(result: ProfileResult) -> str:
    """The terminal summary: rollouts/s, requests/s per endpoint, latency percentiles, the commonest errors."""
    lines = [
        f"ngym profile: {result.environment or '?'} at {result.target}: {result.users} users, {result.duration_s:.1f}s",
        f"  rollouts   {result.rollouts_finished} finished ({result.rollouts_per_s:.1f}/s), "
        f"{result.rollouts_failed} failed ({result.failure_ratio:.2%}; max {result.max_fail_ratio:.2%})",
        f"  rollout latency  p50 {_ms(result.rollout_p50_ms)} ms  p95 {_ms(result.rollout_p95_ms)} ms  "
        f"p99 {_ms(result.rollout_p99_ms)} ms",
    ]
    if result.mean_reward is not None or result.judge_failures:
        mean = "n/a" if result.mean_reward is None else f"{result.mean_reward:.3f}"
        lines.append(
            f"  verify     mean reward {mean}; {result.judge_failures} judge failures (the server could not score: "
            "no reward, left out of the mean)"
        )
    if result.reward_mismatches:
        lines.extend(stale_recording_lines(result))
    if result.sessions_left_live is not None:
        lines.append(
            f"  sessions   {result.sessions_left_live} left live after the run"
            + (
                f": {leak_line(result)}"
                if result.leaked_sessions
                else f" (≤ {result.users}: rollouts cut off by the stop)"
            )
        )
    width = max([len(e.label) for e in result.endpoints] + [len("Aggregated"), 8])
    lines.append("")
    header = f"{'requests':>8}  {'fails':>6}  {'req/s':>8}  {'p50':>6}  {'p95':>6}  {'p99':>6}  (ms)"
    lines.append(f"  {'endpoint':<{width}}  {header}")
    for entry in [*result.endpoints, result.total]:
        label = "Aggregated" if entry is result.total else entry.label
        lines.append(
            f"  {label:<{width}}  {entry.requests:>8}  {entry.failures:>6}  {entry.requests_per_s:>8.1f}  "
            f"{_ms(entry.p50_ms):>6}  {_ms(entry.p95_ms):>6}  {_ms(entry.p99_ms):>6}"
        )
    lines.append("")
    if result.errors:
        lines.append("  most common errors:")
        for error in result.errors[:5]:
            lines.append(f"    {error.count:>6}×  {error.endpoint}: {error.error}")
    else:
        lines.append("  errors: none")
    lines.append(f"  load generator CPU  {result.load_generator_cpu_percent:.0f}% of one core (mean over the run)")
    if result.load_generator_cpu_warning:
        lines.append(
            "  note: the load generator's CPU went above 90%: figures are bounded by the generator, not only "
            "the server (use fewer users, or run Locust on another machine with loadtests/locustfile.py)"
        )
    for kind, path in result.reports.items():
        note = {"rollouts": "  (rollouts/s, latency, rewards, failure classes)", "html": "  (Locust, per request)"}
        lines.append(f"  {kind:<8} {path}{note.get(kind, '')}")
    return "\n".join(lines)


def stale_recording_lines(result: ProfileResult, shown: int = 5) -> list[str]:
    """What the rewards that differ from the recording mean: the rows, and that the recording may be stale."""
    rows = sorted(result.mismatched_rows.items(), key=lambda item: int(item[0]))
    examples = ", ".join(f"row {i}: recorded {pair[0]:g}, server {pair[1]:g}" for i, pair in rows[:shown])
    more = f", and {len(rows) - shown} more rows" if len(rows) > shown else ""
    return [
        f"  recording  {result.reward_mismatches} rollouts ({len(rows)} rows) scored differently from the recorded "
        f"reward ({examples}{more})",
        "             the server answered normally with another reward for the same trajectory: the recording may "
        "be stale (re-record it, or check what changed in verify); not a failure (a server that failed is counted "
        "under 'failed' or 'judge failures')",
    ]


def render_json(result: ProfileResult) -> str:
    return json.dumps(result.to_dict(), indent=2)
