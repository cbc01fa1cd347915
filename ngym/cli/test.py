"""``ngym test``: run an environment's own tests (NeMo Gym's ``gym env test`` way)."""

from __future__ import annotations

import sys

import click

from ngym.envtest import run_tests


@click.command(
    short_help="Run an environment's own tests (pytest).",
    context_settings={"ignore_unknown_options": True},
)
@click.argument("target")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def test(target: str, pytest_args: tuple[str, ...]) -> None:
    """Run the own tests of an environment (installed NAME or FOLDER) with pytest, from inside its folder.

    Extra arguments go to pytest. pytest-asyncio runs in auto mode; the folder and the folder holding
    resources_servers/ are on PYTHONPATH, as NeMo Gym's `gym env test` sets them.

    \b
    Examples:
      ngym test math_with_judge
      ngym test ./resources_servers/my_env -- -k verify -x
    """
    sys.exit(run_tests(target, [a for a in pytest_args if a != "--"]))
