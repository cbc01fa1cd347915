"""The ngym hook plugin of ``ngym-openenv``: OpenEnv as the ``openenv:`` install source.

Light on purpose (every ``ngym install`` loads it): the install flow is imported when it runs. An installed
OpenEnv environment is a pip distribution of its own, so ``ngym uninstall`` removes it through pip.
"""

from __future__ import annotations

from ngym import hookimpl
from ngym.plugin_api import InstallSource, InstallSources


@hookimpl
def ngym_register_install_sources(register: InstallSources) -> None:
    register.add(
        InstallSource.lazy(
            "openenv",
            "ngym_openenv.install:install_source",
            available="ngym_openenv.catalog:available",
            description="OpenEnv environments: a distribution, a folder or a running server's URL",
            options="reward_rule=last|sum|state:FIELD, app=module:attr, python=PATH, examples=FILE.jsonl",
        )
    )
