"""Run one bounded, headless Locust load test through Locust's library API and collect its result.

As Locust's "use as a library" guide lays it out: an ``Environment`` with our user class, a local runner,
``runner.start(users, spawn_rate)``, a timer that stops it, then Locust's own CSV writer
(``StatsCSVFileWriter``) and HTML report (``locust.html.get_html_report``) into the report folder.

Import this module first in a process: importing Locust monkey-patches the standard library with gevent.
"""

from __future__ import annotations

try:
    import gevent
    import locust  # noqa: F401  (patches the process with gevent: before anything else opens sockets)
except ImportError as exc:  # pragma: no cover - depends on the installation
    from ngym.errors import ConfigError

    raise ConfigError(f"ngym profile needs Locust ({exc.name} is missing): pip install 'ngym[profile]'") from None

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from locust import stats as locust_stats
from locust.env import Environment
from locust.html import get_html_report

from ngym.profiling.report import EndpointStats, ErrorCount, ProfileResult, percentile
from ngym.profiling.rollout_report import write_rollout_report
from ngym.profiling.scenario import Scenario
from ngym.profiling.user import RolloutTracker, rollout_user_class
from ngym.rewards import Bounds

#: Seconds a stopping user may take to finish the rollout it is in (so no rollout is cut in half).
STOP_TIMEOUT_S = 10.0
#: Seconds between points of the HTML report's charts (Locust's default, 5 s, leaves short runs bare).
HISTORY_INTERVAL_S = 1.0


def _endpoint(entry: Any, duration_s: float) -> EndpointStats:
    return EndpointStats(
        method=entry.method or "",
        name=entry.name,
        requests=entry.num_requests,
        failures=entry.num_failures,
        requests_per_s=entry.num_requests / duration_s if duration_s > 0 else 0.0,
        p50_ms=float(entry.get_response_time_percentile(0.50) or 0),
        p95_ms=float(entry.get_response_time_percentile(0.95) or 0),
        p99_ms=float(entry.get_response_time_percentile(0.99) or 0),
        avg_ms=float(entry.avg_response_time or 0),
        max_ms=float(entry.max_response_time or 0),
    )


_ROUTE_ORDER = {"/seed_session": 0, "/reset": 0, "/verify": 2, "/close_session": 3, "/close": 3}


def _rollout_order(entry: EndpointStats) -> tuple[int, str]:
    """Endpoints in a rollout's order: seed (or reset), the tools (by name; or step), verify, close."""
    return _ROUTE_ORDER.get(entry.name, 1), entry.name


def _errors(env: Environment) -> list[ErrorCount]:
    errors = [
        ErrorCount(endpoint=f"{e.method} {e.name}".strip(), error=str(e.error), count=e.occurrences)
        for e in env.runner.stats.errors.values()  # type: ignore[union-attr]
    ]
    return sorted(errors, key=lambda e: -e.count)


def _unscorable(tracker: RolloutTracker) -> list[ErrorCount]:
    """Verify answers whose reward breaks the reward rule: failed rollouts though the request itself succeeded."""
    return [ErrorCount("POST /verify", reason, count) for reason, count in tracker.unscorable.items()]


def run_load(
    *,
    host: str,
    rows: list[dict[str, Any]],
    scenario: Scenario,
    users: int,
    spawn_rate: float,
    duration_s: float,
    max_fail_ratio: float,
    environment_name: str | None = None,
    report_dir: Path | None = None,
    report_prefix: str = "profile",
    progress: Callable[[str], None] | None = None,
    reward_range: Bounds | None = None,
) -> ProfileResult:
    """Drive ``users`` simulated users doing whole rollouts against ``host`` for ``duration_s`` seconds
    (``reward_range``: the server's; a reward outside it is a failed rollout)."""
    tracker = RolloutTracker(reward_range=reward_range)
    user_class = rollout_user_class(scenario, rows, host, tracker)
    env = Environment(user_classes=[user_class], host=host, stop_timeout=STOP_TIMEOUT_S, catch_exceptions=True)
    env.locustfile = f"ngym profile {environment_name or host} (whole rollouts)"  # the report's "Script:"
    runner = env.create_local_runner()

    csv_writer = None
    greenlets: list[gevent.Greenlet] = []
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        csv_writer = locust_stats.StatsCSVFileWriter(
            env, locust_stats.PERCENTILES_TO_REPORT, str(report_dir / report_prefix), full_history=True
        )
        greenlets.append(gevent.spawn(csv_writer.stats_writer))

    def history() -> None:
        while True:
            locust_stats.update_stats_history(runner)
            gevent.sleep(HISTORY_INTERVAL_S)

    def report_progress() -> None:
        while progress is not None:
            gevent.sleep(2.0)
            progress(
                f"  {tracker.elapsed_s:5.1f}s  {runner.user_count:>4} users  {tracker.finished:>7} rollouts "
                f"({tracker.finished / tracker.elapsed_s:.1f}/s)  {tracker.failed} failed"
            )

    greenlets.append(gevent.spawn(history))
    if progress is not None:
        greenlets.append(gevent.spawn(report_progress))

    cpu_started = time.process_time()
    tracker.started_at = time.monotonic()
    runner.start(users, spawn_rate=spawn_rate)
    gevent.spawn_later(duration_s, runner.quit)
    runner.greenlet.join()
    tracker.stop()
    cpu_s = time.process_time() - cpu_started
    locust_stats.update_stats_history(runner)

    reports: dict[str, str] = {}
    if csv_writer is not None:
        gevent.sleep(locust_stats.CSV_STATS_INTERVAL_SEC + 0.2)  # let the writer write the final figures
    gevent.killall(greenlets, block=True)
    if csv_writer is not None and report_dir is not None:
        csv_writer.requests_flush()
        csv_writer.stats_history_flush()
        csv_writer.failures_flush()
        csv_writer.exceptions_flush()
        csv_writer.close_files()
        html_path = report_dir / f"{report_prefix}.html"
        html = get_html_report(env, show_download_link=False)  # type: ignore[no-untyped-call]  # Locust is untyped
        html_path.write_text(html, encoding="utf-8")
        reports["html"] = str(html_path)
        reports["csv"] = str(report_dir / f"{report_prefix}_stats.csv")

    duration = tracker.elapsed_s
    stats = runner.stats
    endpoints = sorted((_endpoint(e, duration) for e in stats.entries.values()), key=_rollout_order)
    durations = tracker.durations_ms
    result = ProfileResult(
        target=host,
        environment=environment_name,
        users=users,
        spawn_rate=spawn_rate,
        duration_s=duration,
        rollouts_finished=tracker.finished,
        rollouts_failed=tracker.failed,
        rollout_p50_ms=percentile(durations, 0.50),
        rollout_p95_ms=percentile(durations, 0.95),
        rollout_p99_ms=percentile(durations, 0.99),
        mean_reward=sum(tracker.rewards) / len(tracker.rewards) if tracker.rewards else None,
        reward_mismatches=tracker.reward_mismatches,
        mismatched_rows={str(i): list(pair) for i, pair in sorted(tracker.mismatched_rows.items())},
        judge_failures=tracker.judge_failures,
        endpoints=endpoints,
        total=_endpoint(stats.total, duration),
        errors=sorted(_errors(env) + _unscorable(tracker), key=lambda e: -e.count),
        max_fail_ratio=max_fail_ratio,
        load_generator_cpu_warning=bool(runner.cpu_warning_emitted),
        load_generator_cpu_percent=100 * cpu_s / duration,
        reports=reports,
    )
    if report_dir is not None:
        page = write_rollout_report(result, tracker, report_dir, report_prefix)
        result.reports = {"rollouts": str(page), **reports}
    return result
