"""``ngym prepare``: run an environment's data-preparation step (``ngym.readiness``)."""

from __future__ import annotations

import click

from ngym.cli.progress import Ticker
from ngym.errors import NgymError
from ngym.readiness import PrepareError, prepare
from ngym.required_env import check_env
from ngym.targets import resolve


class PrepareFailed(NgymError):
    """The environment has no step to run, or its step failed (one line: what ran and its last line)."""


@click.command(short_help="Run an environment's data-preparation step.")
@click.argument("target")
def prepare_command(target: str) -> None:
    """Make the data an installed environment needs before it serves (its own script, e.g. NeMo Gym's wordle:
    generate_data.py), with ngym's interpreter, from the environment's folder. `ngym install` and `ngym run`
    say when an environment needs it.
    """
    environment = resolve(target)
    check_env(environment)  # its data step may read them too; said before it runs
    try:
        with Ticker(f"preparing {environment.name}", lambda: "running its data-preparation script"):
            script = prepare(environment.name, environment.folder)
    except PrepareError as exc:
        raise PrepareFailed(str(exc)) from None
    click.echo(f"ngym: prepared {environment.name} ({script.name} ran); try: ngym run {environment.name}")
