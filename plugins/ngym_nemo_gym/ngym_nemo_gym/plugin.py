"""The ngym hook plugin of ``ngym-nemo-gym``: NeMo Gym's catalogue as the ``nemo-gym:`` install source.

Light on purpose (every ``ngym install`` loads it): the catalogue's modules are imported when a function runs.
"""

from __future__ import annotations

from typing import Any

from ngym import hookimpl
from ngym.plugin_api import InstallSource, InstallSources

PREFIX = "nemo-gym"


def _uninstall(names: list[str], *, yes: bool, echo: Any) -> list[str]:
    """The NeMo Gym environments among ``names`` (``nemo-gym:NAME`` or their ``ngym-nemo-*`` distributions),
    uninstalled together (a code-only sibling goes with the environment that imports it)."""
    from ngym import NgymError
    from ngym_nemo_gym.catalogue.uninstall import is_nemo_distribution, uninstall_packages

    mine = [n for n in names if n.startswith(f"{PREFIX}:") or is_nemo_distribution(n)]
    if mine:
        code = uninstall_packages(mine, yes=yes, echo=echo)
        if code:
            raise NgymError(f"pip could not uninstall {', '.join(mine)} (exit {code})")
    return mine


@hookimpl
def ngym_register_install_sources(register: InstallSources) -> None:
    register.add(
        InstallSource.lazy(
            PREFIX,
            "ngym_nemo_gym.catalogue.install:install_nemo_environment",
            reads=("replace",),  # its config names the domain; no --option
            available="ngym_nemo_gym.catalogue.catalog:available_with_status",
            uninstall=_uninstall,
            claims="ngym_nemo_gym.catalogue.install:is_nemo_source",
            description="NeMo Gym 0.7.0's environments (from the nemo-gym wheel) and NeMo Gym environment folders",
        )
    )
