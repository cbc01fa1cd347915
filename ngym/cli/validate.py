"""``ngym validate``: registration rules, in-process app, example replay and verifier soundness."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import TypeVar

import click

from ngym.cli.progress import Ticker
from ngym.errors import NgymError, debug_enabled
from ngym.readiness import needs_of
from ngym.required_env import check_env
from ngym.targets import resolve
from ngym.validation import ValidationReport
from ngym.validation import validate as run_validation

T = TypeVar("T")


@click.command(short_help="Check an environment: config, routes, example rewards.")
@click.argument("target")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@click.option("-v", "--verbose", is_flag=True, help="Show the environment's log, tracebacks included.")
def validate(target: str, as_json: bool, verbose: bool) -> None:
    """Validate an environment: an installed NAME, or a PATH (its folder, configs/NAME.yaml or app.py).

    Exit code 1 when any check fails. Each distinct failure is one line with its row count; the tracebacks
    behind them show with -v or NGYM_DEBUG=1.
    """
    try:
        environment = resolve(target)
    except NgymError:
        environment = None  # validation reports why, as a FAIL line
    if environment is not None:
        check_env(environment)  # before the app starts: its startup would fail on it, naming nothing
    stage = ["loading"]
    with Ticker(f"validating {target}", lambda: stage[0]):

        def call() -> ValidationReport:
            return run_validation(target, progress=lambda text: stage.__setitem__(0, text))

        report = call() if verbose or debug_enabled() else _quietly(call)
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else report.render())
    if not as_json:
        for sentence in needs_of(target):
            click.echo(f"note: {sentence}")
    if not report.ok:
        sys.exit(1)


def _quietly(call: Callable[[], T]) -> T:
    """``call()`` with ngym's log silenced: handler 500s are expected in the soundness pass, and the report
    says each distinct one once (their tracebacks: ``-v``). The level is restored after, so a process that
    validates (a test run, a notebook) keeps its own logging."""
    logger = logging.getLogger("ngym")
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        return call()
    finally:
        logger.setLevel(previous)
