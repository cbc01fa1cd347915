"""The ngym hook plugin: every installed verifiers environment is a registered resources server.

Registered lazily by target (``ngym_verifiers.installed:<name>``), so ``ngym list`` reads the records and
imports nothing of the environment; the class is made when the server is used. Each is registered with its
own folder (``<records>/<name>``, whose ``data/`` ``ngym install`` wrote: ``ngym_verifiers.examples``).
"""

from __future__ import annotations

from typing import Any

from ngym import hookimpl
from ngym.plugin_api import InstallSource, InstallSources, Register
from ngym_verifiers import examples, records


@hookimpl
def ngym_register_resources_servers(register: Register) -> None:
    for record in records.all_records():
        register.add(
            f"ngym_verifiers.installed:{record.name}",
            name=record.name,
            domain=record.domain,
            description=record.description,
            # its own data/ (examples made at install): ngym validate, profile and rollout read them there
            folder=examples.folder_of(record.name),
        )


def _uninstall(names: list[str], *, yes: bool, echo: Any) -> list[str]:
    """The installed verifiers environments among ``names`` (their records and venvs), removed."""
    from ngym_verifiers.install import uninstall

    return [name for name in names if uninstall(name.removeprefix("verifiers:"), echo=echo)]


@hookimpl
def ngym_register_install_sources(register: InstallSources) -> None:
    register.add(
        InstallSource.lazy(
            "verifiers",
            "ngym_verifiers.install:install_source",
            available="ngym_verifiers.catalog:available",
            uninstall=_uninstall,
            description="verifiers environments: a 0.4 taskset or a load_environment module, folder or distribution",
            options="an argument of load_environment (its value read as JSON when it parses); dataset:NAME=FILE.jsonl",
        )
    )
