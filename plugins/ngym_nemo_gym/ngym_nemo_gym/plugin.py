"""The ngym hook plugin of ``ngym-nemo-gym``: NeMo Gym's catalogue as the ``nemo-gym:`` install source.

Light on purpose (every ``ngym install`` loads it): the catalogue's modules are imported when a function runs.
"""

from __future__ import annotations

from typing import Any

from ngym import hookimpl
from ngym.plugin_api import InstallSource, InstallSources

PREFIX = "nemo-gym"


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
    from ngym_nemo_gym.catalogue.install import install_nemo_environment

    if domain or options:
        raise NgymError("--domain and --option do not apply to NeMo Gym environments (their config names the domain)")
    return install_nemo_environment(source, as_name=as_name, replace=replace, verbose=verbose, echo=echo)


def _claims(source: str) -> bool:
    from ngym_nemo_gym.catalogue.install import is_nemo_source

    return is_nemo_source(source)


def _available() -> list[dict[str, Any]]:
    from ngym_nemo_gym.catalogue.catalog import available_with_status

    return available_with_status()


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
        InstallSource(
            prefix=PREFIX,
            install=_install,
            available=_available,
            uninstall=_uninstall,
            claims=_claims,
            description="NeMo Gym 0.7.0's environments (from the nemo-gym wheel) and NeMo Gym environment folders",
        )
    )
