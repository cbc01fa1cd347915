"""``ngym plugins``: hook plugins, their distributions and the hooks each implements (for debugging)."""

from __future__ import annotations

import click


@click.command(short_help="List hook plugins and their hooks.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plugins(as_json: bool) -> None:
    """List hook plugins (entry-point group `ngym`, plus ngym's built-ins) and the hooks they implement."""
    from ngym.cli.list import render_hooks

    click.echo(render_hooks(as_json))
