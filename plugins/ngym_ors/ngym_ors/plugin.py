"""The ngym hook plugin: every installed ORS environment is a registered resources server, and
``ngym install ors:<folder | distribution>`` installs one.

Registered lazily by target (``ngym_ors.installed:<name>``), so ``ngym list`` reads the records and starts
nothing; each with its own folder (``<records>/<name>``, whose ``data/example.jsonl`` ``ngym install`` wrote).
"""

from __future__ import annotations

from typing import Any

from ngym import hookimpl
from ngym.plugin_api import InstallSource, InstallSources, Register
from ngym_ors import records


@hookimpl
def ngym_register_resources_servers(register: Register) -> None:
    for record in records.all_records():
        register.add(
            f"ngym_ors.installed:{record.name}",
            name=record.name,
            domain=record.domain,
            description=record.description,
            folder=records.folder_of(record.name),
        )


def _uninstall(names: list[str], *, yes: bool, echo: Any) -> list[str]:
    """The installed ORS environments among ``names`` (their records, data and venvs), removed."""
    from ngym_ors.install import uninstall

    return [name for name in names if uninstall(name.removeprefix("ors:"), echo=echo)]


@hookimpl
def ngym_register_install_sources(register: InstallSources) -> None:
    register.add(
        InstallSource.lazy(
            "ors",
            "ngym_ors.install:install_source",
            uninstall=_uninstall,
            description="Open Reward Standard environments: a folder with server.py, or a distribution",
            options=(
                "module=NAME (the module defining it), environment=CLASS (one of several), max_tasks=N, max_rollouts=N"
            ),
        )
    )
