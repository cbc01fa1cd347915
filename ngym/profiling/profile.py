"""``ngym profile`` as a library call: resolve the target, start it if needed, run the load (or the sweep).

Import ``ngym.profiling.runner`` before this module's callers open sockets: it imports Locust, which
gevent-patches the process (``profile()`` does so first thing).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from ngym.errors import ConfigError
from ngym.profiling.report import ProfileResult
from ngym.profiling.sweep import SweepResult, SweepStep
from ngym.targets import is_url

#: The longest load run (or sweep step) ngym profile accepts: load is always bounded.
MAX_DURATION_S = 3600.0
MAX_USERS = 10_000


@dataclass
class ProfileOptions:
    target: str  # installed environment name, config file, or http(s) URL
    users: int = 10
    spawn_rate: float | None = None  # default: all users within about a second
    duration_s: float = 30.0
    workers: int = 1
    data: Path | None = None
    report_dir: Path | None = None
    max_fail_ratio: float = 0.01
    sweep: bool = False
    sweep_users: list[int] | None = None
    p99_ms: float = 1000.0
    startup_timeout_s: float = 60.0

    def validate(self) -> None:
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise ConfigError(f"--duration must be between 0 and {MAX_DURATION_S:.0f}s (got {self.duration_s}s)")
        if not 1 <= self.users <= MAX_USERS:
            raise ConfigError(f"--users must be between 1 and {MAX_USERS}")
        if self.spawn_rate is not None and self.spawn_rate <= 0:
            raise ConfigError("--spawn-rate must be positive")
        if not 0 <= self.max_fail_ratio <= 1:
            raise ConfigError("--max-fail-ratio must be between 0 and 1")
        if self.p99_ms <= 0:
            raise ConfigError("--p99-ms must be positive")


def parse_duration(text: str) -> float:
    """``"30s"``, ``"2m"``, ``"1m30s"``, ``"45"`` (seconds) → seconds."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", text)
    if not text or match is None:
        raise ConfigError(f"bad duration {text!r}: use e.g. 30s, 2m, 1m30s")
    hours, minutes, seconds = match.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds or 0)


def profile(
    options: ProfileOptions, progress: Callable[[str], None] | None = None
) -> tuple[ProfileResult | None, SweepResult | None]:
    """Run ``ngym profile``: one load run (``ProfileResult``) or a sweep (``SweepResult``)."""
    from ngym.profiling import runner  # noqa: I001 - first: Locust gevent-patches the process
    from ngym.child_server import fetch_health, serve_environment
    from ngym.fleet.status import live_sessions_at
    from ngym.profiling.scenario import load_rows, resolve_scenario
    from ngym.profiling.sweep import run_sweep, user_steps, write_json, write_plot
    from ngym.profiling.target import resolve_target, resolve_url_target
    from ngym.rewards import bounds_from_health
    from ngym.rollout.gymnasium import server_post_routes

    options.validate()
    say = progress or (lambda _line: None)
    server: AbstractContextManager[str]
    if is_url(options.target):
        resolved = resolve_url_target(options.target, options.data)
        name, data, server = resolved.name, resolved.data, nullcontext(resolved.url)
    else:
        name, data = resolve_target(options.target, options.data)
        log = options.report_dir / "server.log" if options.report_dir is not None else None
        server = serve_environment(
            options.target, workers=options.workers, timeout=options.startup_timeout_s, log=log, progress=say
        )
    rows = load_rows(data)  # bad data is an error before any server starts
    if not is_url(options.target):
        say(f"ngym profile: starting {options.target} ({options.workers} worker(s)) on 127.0.0.1")

    with server as url:
        # The scenario follows the protocol the server speaks (seed/verify, or Gymnasium's reset/step).
        scenario = resolve_scenario(name, server_post_routes(url))
        reward_range = bounds_from_health(fetch_health(url, timeout=10.0))  # what validate checks rewards against
        say(f"ngym profile: {len(rows)} rows from {data}; scenario {type(scenario).__name__}")

        def run_once(users: int, report_dir: Path | None, prefix: str) -> ProfileResult:
            spawn_rate = options.spawn_rate or float(users)
            say(f"ngym profile: {users} users (spawn rate {spawn_rate:g}/s) for {options.duration_s:g}s → {url}")
            before = live_sessions_at(url)  # every worker's: one /health answers for the worker it reaches
            result = runner.run_load(
                host=url,
                rows=rows,
                scenario=scenario,
                users=users,
                spawn_rate=spawn_rate,
                duration_s=options.duration_s,
                max_fail_ratio=options.max_fail_ratio,
                environment_name=name,
                report_dir=report_dir,
                report_prefix=prefix,
                progress=progress,
                reward_range=reward_range,
            )
            after = live_sessions_at(url)
            if before is not None and after is not None:
                result.sessions_left_live = after - before
            return result

        if not options.sweep:
            return run_once(options.users, options.report_dir, "profile"), None

        report_dir = options.report_dir or Path("ngym-sweep")
        steps = options.sweep_users or user_steps(options.users)

        def on_step(step: object) -> None:
            assert isinstance(step, SweepStep)
            say(
                f"  step {step.users} users: {step.result.rollouts_per_s:.1f} rollouts/s, p99 {step.p99_ms:.0f} ms, "
                f"failures {step.result.failure_ratio:.1%} → {'met' if step.met else 'missed'}"
            )

        sweep = run_sweep(
            lambda users: run_once(users, report_dir / f"step_{users:04d}_users", "profile"),
            steps,
            options.p99_ms,
            options.max_fail_ratio,
            on_step=on_step,
        )
    title = f"ngym profile --sweep: {name or options.target} ({options.duration_s:g}s per step)"
    sweep.plot = str(write_plot(sweep, report_dir / "sweep.png", title))
    write_json(sweep, report_dir / "sweep.json")
    return None, sweep
