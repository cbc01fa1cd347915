"""``--fleet``: the option ``ngym rollout`` and ``ngym profile`` share to name an environment of a running fleet."""

from __future__ import annotations

import click

fleet_option = click.option(
    "--fleet",
    default=None,
    metavar="FLEET",
    help="TARGET is an environment of this running fleet, by its name there: FLEET is the fleet's head server "
    "URL (http://HOST:PORT, as `ngym up` prints), its fleet file or its state dir.",
)
