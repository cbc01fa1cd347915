"""``ngym init``: scaffold a new environment package."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from ngym.cli.invocation import ngym_command
from ngym.scaffold import scaffold


@click.command(short_help="Scaffold a new environment package.")
@click.argument("name")
@click.option("--domain", default="agent", show_default=True, help="The Domain it trains (math, coding, agent, ...).")
@click.option(
    "--dir",
    "parent",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="Folder to create NAME/ in (default: the current one).",
)
@click.option("--description", default=None, help="One line saying what the environment is.")
def init(name: str, domain: str, parent: Path, description: str | None) -> None:
    """Create NAME/: a pip-installable environment (one tool, seed_session, verify, data, tests).

    \b
    Then:
      pip install -e ./NAME   (or: ngym install -e ./NAME)
      ngym validate NAME && ngym run NAME
    """
    path = scaffold(name, domain=domain, parent=parent, description=description)
    click.echo(f"created {path}/ (domain {domain})")
    ngym = ngym_command()
    where = shlex.quote(str(path) if path.is_absolute() or str(path).startswith(".") else f"./{path}")
    click.echo(f"next: {ngym} install -e {where} && {ngym} validate {name} && {ngym} run {name}")
