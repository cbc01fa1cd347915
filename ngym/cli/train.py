"""``ngym train ...``: what a trainer needs to train on an ngym environment (see docs/training.md)."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from ngym.errors import ConfigError


@click.group(name="train", short_help="Configs for trainers (verl) on an environment.")
def train() -> None:
    """Configs and helpers for training on an ngym environment with a trainer's own code (docs/training.md)."""


@train.command(name="verl-tools")
@click.argument("target")
@click.option(
    "--url",
    help="Where the environment is served (default: TARGET when it is a URL; needed for a name, folder or config).",
)
@click.option(
    "--data",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Dataset rows (JSONL) whose tool descriptions to use (default: the environment's data/example.jsonl).",
)
@click.option("--timeout", type=float, help="Seconds for one tool call or verify (default 120).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here, not to stdout.")
def verl_tools(target: str, url: str | None, data: Path | None, timeout: float | None, output: Path | None) -> None:
    """verl's tool config (YAML) for TARGET: each tool route a verl BaseTool (ngym.train.verl.NgymTool).

    TARGET is a running server's URL, or an installed environment's name (or folder, or config file) with --url
    where it is served. Use the file as actor_rollout_ref.rollout.multi_turn.tool_config_path.
    """
    from ngym.train.environment_tools import environment_tools
    from ngym.train.tool_schemas import verl_tool_config

    is_url = target.startswith(("http://", "https://"))
    served_at = url or (target if is_url else None)
    if served_at is None:
        from ngym.targets import resolve

        resolve(target)  # a misspelt name is "no environment named ...; did you mean ...", not a missing --url
        raise ConfigError(f"{target} is not a URL: say where it is served with --url http://HOST:PORT")
    if not served_at.startswith(("http://", "https://")):
        raise ConfigError(f"--url {served_at}: not an http(s) URL")
    config = verl_tool_config(served_at, environment_tools(target, data), timeout=timeout)
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=120)
    if output is None:
        click.echo(text, nl=False)
        return
    output.write_text(text)
    click.echo(f"wrote {output}: {len(config['tools'])} tool(s) for {served_at}", err=True)
