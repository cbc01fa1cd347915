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


def _install(
    source: str,
    *,
    as_name: str | None,
    domain: str | None,
    options: dict[str, str],
    replace: bool,
    verbose: bool,
    echo: Any,
) -> Any:
    from ngym import NgymError
    from ngym_verifiers.install import install_source

    if replace:
        raise NgymError("--replace applies to NeMo Gym environments; uninstall the other environment first")
    return install_source(source, as_name=as_name, domain=domain, options=options, verbose=verbose, echo=echo)


def _available() -> list[dict[str, Any]]:
    from ngym_verifiers.catalog import available

    return available()


def _uninstall(names: list[str], *, yes: bool, echo: Any) -> list[str]:
    """The installed verifiers environments among ``names`` (their records and venvs), removed."""
    from ngym_verifiers.install import uninstall

    return [name for name in names if uninstall(name.removeprefix("verifiers:"), echo=echo)]


@hookimpl
def ngym_register_install_sources(register: InstallSources) -> None:
    register.add(
        InstallSource(
            prefix="verifiers",
            install=_install,
            available=_available,
            uninstall=_uninstall,
            description="verifiers environments: a 0.4 taskset or a load_environment module, folder or distribution",
            options="an argument of load_environment (its value read as JSON when it parses); dataset:NAME=FILE.jsonl",
        )
    )
