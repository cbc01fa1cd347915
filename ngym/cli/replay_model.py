"""``ngym replay-model``: serve the offline replay model (and scripted judge) over HTTP."""

from __future__ import annotations

from pathlib import Path

import click
import uvicorn

from ngym.errors import ConfigError
from ngym.rollout.replay_model import create_replay_app, example_rollouts_of, read_rows
from ngym.rollout.scripted_judge import ScriptedJudge


@click.command("replay-model", short_help="Serve the offline replay model (OpenAI Responses API).")
@click.option(
    "--data",
    "data",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    multiple=True,
    help="Rows with a recorded `response` or `ground_truth` calls (JSONL); repeatable.",
)
@click.option(
    "--env",
    "envs",
    multiple=True,
    metavar="NAME",
    help="Also load an installed environment's data/example_rollouts.jsonl; repeatable.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8010, show_default=True)
@click.option(
    "--judge/--no-judge",
    default=True,
    show_default=True,
    help="Answer judge prompts (<answer_a>/<answer_b>) by string match.",
)
@click.option("--judge-match", type=click.Choice(["normalised", "exact"]), default="normalised", show_default=True)
@click.option("--equal-label", default="[[A=B]]", show_default=True)
@click.option("--not-equal-label", default="[[A!=B]]", show_default=True)
def replay_model(
    data: tuple[Path, ...],
    envs: tuple[str, ...],
    host: str,
    port: int,
    judge: bool,
    judge_match: str,
    equal_label: str,
    not_equal_label: str,
) -> None:
    """An OpenAI-Responses-compatible model (POST /v1/responses) that replays recorded rollouts.

    \b
    Example:
      ngym replay-model --env example_single_tool_call --port 8010
      ngym rollout example_single_tool_call --data rows.jsonl --model-url http://127.0.0.1:8010/v1
    """

    paths = list(data)
    for name in envs:
        examples = example_rollouts_of(name)
        if examples is None:
            raise ConfigError(f"environment {name!r} ships no data/example_rollouts.jsonl")
        paths.append(examples)
    scripted = ScriptedJudge(equal_label, not_equal_label, judge_match) if judge else None  # type: ignore[arg-type]
    app = create_replay_app(read_rows(paths), judge=scripted)
    click.echo(f"ngym replay-model: {len(app.state.index.plans)} rows; base URL http://{host}:{port}/v1", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
