"""``ngym rollout``: drive an environment with a model end to end and save the rewarded trajectories."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click
from click._termui_impl import ProgressBar

from ngym.cli.fleet_target import fleet_option
from ngym.cli.progress import Ticker
from ngym.fleet.lookup import fleet_target
from ngym.rollout.runner import RolloutEvent, RolloutOptions, default_data, run_rollouts


@click.command(short_help="Roll out a dataset through an environment and a model.")
@click.argument("target")
@click.option(
    "--data",
    "data",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Dataset rows (JSONL, NeMo Gym format). Default: the installed environment's example data "
    "(data/example.jsonl, else data/example_rollouts.jsonl: what `ngym install` wrote), named on one line.",
)
@click.option("--model-url", default=None, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.")
@click.option(
    "--model",
    default=None,
    help="Model name (default: the row's, else the server's first). 'replay' without --model-url serves "
    "the offline replay model itself (recorded example rollouts / ground truth).",
)
@click.option("--api-key-env", default=None, metavar="VAR", help="Environment variable holding the API key.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True, help="Rollouts per row.")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=8, show_default=True, help="Rollouts in flight at once."
)
@click.option(
    "--max-steps", type=click.IntRange(min=1), default=32, show_default=True, help="Model calls per rollout at most."
)
@click.option(
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("rollouts.jsonl"),
    show_default=True,
    help="Results (JSONL); aggregate metrics go beside it as <stem>.metrics.json.",
)
@click.option("--resume", is_flag=True, help="Keep the output and skip the (row, repeat) pairs already in it.")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds per model/tool request.")
@click.option(
    "--max-retries",
    type=click.IntRange(min=0),
    default=4,
    show_default=True,
    help="Retries of a model call on 408/409/429/5xx/connection errors.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Field override for the environment ngym starts (as `ngym run NAME KEY=VALUE`); "
    "{model_url} expands to the model's base URL.",
)
@click.option(
    "--replay-data",
    "replay_data",
    multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="With --model replay: recorded rollouts to replay (default: the environment's example rollouts, "
    "else example_rollouts.jsonl beside --data).",
)
@fleet_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary instead of progress and text.")
def rollout(
    target: str,
    data: Path | None,
    model_url: str | None,
    model: str | None,
    api_key_env: str | None,
    repeats: int,
    concurrency: int,
    max_steps: int,
    output: Path,
    resume: bool,
    timeout: float,
    max_retries: int,
    overrides: tuple[str, ...],
    replay_data: tuple[Path, ...],
    fleet: str | None,
    as_json: bool,
) -> None:
    """Roll out every row of --data (× --repeats) through TARGET, an installed environment (started with
    `ngym run` on a free port and stopped after) or the URL of a running one; with --fleet, the name of an
    environment of a running fleet (`ngym up`), found through its head server's global config. Without --data,
    an installed environment's own example data is rolled out (the file is named on stderr).

    \b
    Examples:
      ngym rollout example_single_tool_call --data rows.jsonl --model-url http://127.0.0.1:8000/v1
      ngym rollout workplace_assistant --data rows.jsonl --model replay --output out.jsonl
      ngym rollout dipg_safety --model replay          # an installed environment's example data
      ngym rollout http://127.0.0.1:9000 --data rows.jsonl --model-url https://api.openai.com/v1 \\
          --model gpt-4.1 --api-key-env OPENAI_API_KEY --repeats 4 --resume
      ngym rollout weather --fleet fleet.yaml --data rows.jsonl --model-url http://127.0.0.1:8000/v1
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Retries are worth seeing: the openai client logs each one ("Retrying request in ...") at INFO.
    logging.getLogger("openai._base_client").setLevel(logging.INFO)
    resolved = fleet_target(target, fleet)
    if data is None and fleet:
        from ngym.fleet.data import ROLLOUT_ORDER, fleet_data

        data = fleet_data(fleet, target, resolved, ROLLOUT_ORDER)
        click.echo(f"ngym: no --data: rolling out {target}'s example data, {data}", err=True)
    elif data is None:
        data = default_data(resolved)
        click.echo(f"ngym: no --data: rolling out {target}'s example data, {data}", err=True)
    options = RolloutOptions(
        target=resolved,
        data=data,
        model_url=model_url,
        model=model,
        api_key_env=api_key_env,
        repeats=repeats,
        concurrency=concurrency,
        max_steps=max_steps,
        output=output,
        resume=resume,
        timeout=timeout,
        max_retries=max_retries,
        env_overrides=list(overrides),
        replay_data=list(replay_data),
    )
    rewards: list[float] = []
    failures = 0
    total = [0]
    # Shown once the servers are up: an error before that is one line, with no bar drawn.
    bar: ProgressBar[RolloutEvent] | None = None
    ticker: Ticker | None = None  # without a terminal: a plain progress line every few seconds instead of a bar

    def on_start(pending: int) -> None:
        nonlocal bar, ticker
        if as_json:
            return
        total[0] = pending
        if not sys.stderr.isatty():
            ticker = Ticker("rollouts", lambda: _done_text(len(rewards) + failures, total[0], rewards, failures))
            ticker.__enter__()
            return
        bar = click.progressbar(
            length=pending,
            label="rollouts",
            file=sys.stderr,
            show_pos=True,
            item_show_func=lambda _: _mean_text(rewards, failures),
        )
        bar.__enter__()

    def on_event(event: RolloutEvent) -> None:
        nonlocal failures
        if event.reward is None:
            failures += 1
        else:
            rewards.append(event.reward)
        if bar is not None:
            bar.update(1, current_item=event)

    try:
        summary = run_rollouts(options, on_event, on_start)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
        if ticker is not None:
            ticker.__exit__(None, None, None)
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        mean = "n/a" if summary.mean_reward is None else f"{summary.mean_reward:.4f}"
        click.echo(
            f"{summary.done} rollouts written, {summary.skipped} already done, {len(summary.failed)} failed"
            f" → {summary.output}; mean reward {mean}"
            + (f" ({summary.masked} masked, left out of the mean)" if summary.masked else "")
        )
        for failure in summary.failed[:5]:
            click.echo(f"  failed {failure['_ng_task_index']}.{failure['_ng_rollout_index']}: {failure['error']}")
        if summary.differs_from_recording:
            click.echo(_stale_recording_text(summary.differs_from_recording))
        click.echo(f"aggregate metrics ({summary.metrics_path}):")
        click.echo(json.dumps(summary.aggregate_metrics.get("agent_metrics", summary.aggregate_metrics), indent=2))
    if summary.failed:
        raise SystemExit(1)


def _done_text(done: int, total: int, rewards: list[float], failures: int) -> str:
    mean = _mean_text(rewards, failures)
    return f"{done}/{total} done" + (f", {mean}" if mean else "")


def _mean_text(rewards: list[float], failures: int) -> str:
    if not rewards and not failures:
        return ""
    mean = f"mean reward {sum(rewards) / len(rewards):.3f}" if rewards else "no reward yet"
    return mean + (f", {failures} failed" if failures else "")


def _stale_recording_text(differs: dict[int, tuple[float, float]], shown: int = 5) -> str:
    """Recorded rows the server scored differently (the replay model sent the recorded trajectory)."""
    rows = list(differs.items())
    examples = ", ".join(f"row {i}: recorded {pair[0]:g}, server {pair[1]:g}" for i, pair in rows[:shown])
    more = f", and {len(rows) - shown} more" if len(rows) > shown else ""
    return (
        f"{len(rows)} recorded rows scored differently from their recorded reward ({examples}{more}): the server "
        "answered normally with another reward for the same trajectory, so the recording may be stale (re-record "
        "it, or check what changed in verify); not a failure"
    )
