"""ngym's built-in hook plugin: registers every ``ngym.resources_servers`` entry point.

Built-in environments and third-party ones are both found here, the same way: ``name = "module:Class"``
in a distribution's entry points. Registration is lazy (no import until the server is used or inspected).
The installed entry points are read once per process (every group in one scan of the distributions).
"""

from __future__ import annotations

import functools
from importlib import metadata
from typing import TYPE_CHECKING

from ngym.plugins import hookimpl

if TYPE_CHECKING:
    from ngym.plugins.registry import Register

ENVIRONMENT_GROUP = "ngym.resources_servers"


@functools.cache
def _entry_points() -> dict[str, list[metadata.EntryPoint]]:
    every = metadata.entry_points()  # one scan of the installed distributions for every group
    return {group: list(every.select(group=group)) for group in every.groups}


def installed_entry_points(group: str) -> list[metadata.EntryPoint]:
    """The installed entry points of ``group`` (read once per process; ``forget_installed`` reads them again)."""
    return list(_entry_points().get(group, ()))


def forget_installed() -> None:
    """Read the installed entry points again next time (after installing or uninstalling a distribution)."""
    _entry_points.cache_clear()


@hookimpl
def ngym_register_resources_servers(register: Register) -> None:
    for ep in installed_entry_points(ENVIRONMENT_GROUP):
        register.add_entry_point(ep)
