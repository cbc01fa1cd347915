"""The ngym hook plugin: every installed verifiers environment is a registered resources server.

Registered lazily by target (``ngym_verifiers.installed:<name>``), so ``ngym list`` reads the records and
imports nothing of the environment; the class is made when the server is used. Each is registered with its
own folder (``<records>/<name>``, whose ``data/`` ``ngym install`` wrote: ``ngym_verifiers.examples``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ngym import hookimpl
from ngym_verifiers import examples, records

if TYPE_CHECKING:
    from ngym.plugins.registry import Register


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
