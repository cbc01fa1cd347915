"""``ngym validate``: registration rules, in-process app, example replay and verifier soundness."""

from __future__ import annotations

import json
import logging
import sys

import click

from ngym.cli.progress import Ticker
from ngym.validation import validate as run_validation


@click.command(short_help="Check an environment: config, routes, example rewards.")
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
def validate(target: str, as_json: bool) -> None:
    """Validate an environment: an installed NAME, or a PATH (its folder, configs/NAME.yaml or app.py).

    Exit code 1 when any check fails.
    """

    logging.getLogger("ngym").setLevel(logging.ERROR)  # handler 500s are expected in the soundness pass
    stage = ["loading"]
    with Ticker(f"validating {target}", lambda: stage[0]):
        report = run_validation(target, progress=lambda text: stage.__setitem__(0, text))
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else report.render())
    if not report.ok:
        sys.exit(1)
