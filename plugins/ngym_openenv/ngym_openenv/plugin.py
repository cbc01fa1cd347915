"""The ngym hook plugin of ``ngym-openenv``: OpenEnv as the ``openenv:`` install source.

Light on purpose (every ``ngym install`` loads it): the install flow is imported when it runs. An installed
OpenEnv environment is a pip distribution of its own, so ``ngym uninstall`` removes it through pip.
"""

from __future__ import annotations

from typing import Any

from ngym import hookimpl
from ngym.plugin_api import InstallSource, InstallSources


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
    from ngym_openenv.install import install_source

    if replace:
        raise NgymError("--replace applies to NeMo Gym environments; uninstall the other environment first")
    return install_source(source, as_name=as_name, domain=domain, options=options, verbose=verbose, echo=echo)


def _available() -> list[dict[str, Any]]:
    from ngym_openenv.catalog import available

    return available()


@hookimpl
def ngym_register_install_sources(register: InstallSources) -> None:
    register.add(
        InstallSource(
            prefix="openenv",
            install=_install,
            available=_available,
            description="OpenEnv environments: a distribution, a folder or a running server's URL",
            options="reward_rule=last|sum|state:FIELD, app=module:attr, python=PATH, examples=FILE.jsonl",
        )
    )
