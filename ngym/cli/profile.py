"""``ngym profile``: Locust load profiles of whole rollouts, and a capacity finder (``--sweep``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ngym.cli.fleet_target import fleet_option


def _progress(line: str) -> None:
    click.echo(line, err=True)


def _fleet_target(target: str, fleet: str | None) -> str:
    """TARGET, or with --fleet the URL of the fleet's environment so named (imported after Locust patched)."""
    from ngym.fleet.lookup import fleet_target

    return fleet_target(target, fleet)


@click.command(short_help="Load-test an environment with Locust.")
@click.argument("target")
@click.option(
    "--users",
    "-u",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Concurrent simulated users (each runs whole rollouts back to back). With --sweep: the last step.",
)
@click.option("--spawn-rate", "-r", type=float, default=None, help="Users started per second [default: all at once].")
@click.option("--duration", "-t", default="30s", show_default=True, help="How long to load (per step with --sweep).")
@click.option(
    "--workers",
    "-w",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Workers of the environment ngym starts, as `ngym run --workers` (NAME targets only).",
)
@click.option(
    "--data",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Rows (JSONL) to replay: dataset rows or example rollouts [default: the environment's "
    "data/example_rollouts.jsonl, else data/example.jsonl].",
)
@click.option(
    "--report",
    "report_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write Locust's CSV stats and HTML report (and the sweep's plot) here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option(
    "--max-fail-ratio",
    type=float,
    default=0.01,
    show_default=True,
    help="Exit 1 when more than this fraction of rollouts failed.",
)
@click.option("--sweep", is_flag=True, help="Find capacity: step users up until p99 > --p99-ms or failures > ratio.")
@click.option("--p99-ms", type=float, default=1000.0, show_default=True, help="p99 latency target of --sweep.")
@click.option(
    "--sweep-users", default=None, help="User counts of --sweep, e.g. 1,2,4,8 [default: doubling up to --users]."
)
@click.option(
    "--startup-timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to wait for a started environment's /health.",
)
@fleet_option
def profile(
    target: str,
    users: int,
    spawn_rate: float | None,
    duration: str,
    workers: int,
    data: Path | None,
    report_dir: Path | None,
    as_json: bool,
    max_fail_ratio: float,
    sweep: bool,
    p99_ms: float,
    sweep_users: str | None,
    startup_timeout: float,
    fleet: str | None,
) -> None:
    """Load-test an environment with Locust: simulated users performing whole rollouts.

    TARGET is an installed environment name or a config file (ngym starts it on 127.0.0.1 with `ngym run`
    and stops it afterwards) or the URL of a running server; with --fleet, the name of an environment of a
    running fleet (`ngym up`), found through its head server's global config. Each rollout: /seed_session
    with a dataset row, the recorded tool calls of its example rollout, /verify with the recorded response,
    /close_session, with the rollout's own session cookie.

    \b
    Examples:
      ngym profile example_single_tool_call --users 20 --duration 10s --report out/
      ngym profile http://127.0.0.1:8000 --data rows.jsonl --json
      ngym profile counter --fleet http://127.0.0.1:11000 --users 50 --duration 30s
      ngym profile example_single_tool_call --sweep --p99-ms 200 --duration 5s --report sweep/
    """
    from ngym.profiling import runner  # noqa: F401  (first: Locust gevent-patches the process on import)
    from ngym.profiling.profile import ProfileOptions, parse_duration
    from ngym.profiling.profile import profile as run_profile
    from ngym.profiling.report import check, render_json, render_summary
    from ngym.profiling.sweep import check_sweep, parse_user_steps, render_sweep

    resolved = _fleet_target(target, fleet)
    if data is None and fleet:
        from ngym.fleet.data import PROFILE_ORDER, fleet_data

        data = fleet_data(fleet, target, resolved, PROFILE_ORDER)
    options = ProfileOptions(
        target=resolved,
        users=users,
        spawn_rate=spawn_rate,
        duration_s=parse_duration(duration),
        workers=workers,
        data=data,
        report_dir=report_dir,
        max_fail_ratio=max_fail_ratio,
        sweep=sweep,
        sweep_users=parse_user_steps(sweep_users) if sweep_users else None,
        p99_ms=p99_ms,
        startup_timeout_s=startup_timeout,
    )
    result, sweep_result = run_profile(options, progress=_progress)
    if sweep_result is not None:
        if as_json:
            import json

            click.echo(json.dumps(sweep_result.to_dict(), indent=2))
        else:
            click.echo(render_sweep(sweep_result))
        check_sweep(sweep_result)
        return
    assert result is not None
    click.echo(render_json(result) if as_json else render_summary(result))
    sys.stdout.flush()
    check(result)
