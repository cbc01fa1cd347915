"""Fleet engines: what runs a fleet's environments (``engine:`` in the fleet file), registered by name.

An engine is anything with ``up(spec, reporter, startup_seconds) -> FleetState`` and ``down(state, timeout)
-> list[str]`` (a module will do): ``up`` starts the environments its way, records each one in the state as it
starts, then calls :func:`ngym.fleet.bringup.finish` (global config, head server, NeMo Gym's servers); ``down``
stops what it runs and calls :func:`ngym.fleet.bringup.stop_processes`. Engines register a loader (imported
when used: Docker's SDK and Ray are heavy); ``kubernetes`` writes manifests instead and is not one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ngym.errors import ConfigError
from ngym.fleet.bringup import Reporter
from ngym.fleet.spec import FleetSpec
from ngym.fleet.state import FleetState
from ngym.suggest import did_you_mean


class Engine(Protocol):
    """Brings a fleet up and down (see the module's docstring)."""

    def up(self, spec: FleetSpec, reporter: Reporter | None = ..., startup_seconds: float = ...) -> FleetState: ...

    def down(self, state: FleetState, timeout: float = ...) -> list[str]: ...


_ENGINES: dict[str, Callable[[], Engine]] = {}


def register_engine(name: str, loader: Callable[[], Engine]) -> None:
    """Make ``engine: NAME`` of a fleet file run by the engine ``loader()`` returns (called when first used)."""
    _ENGINES[name] = loader


def engine(name: str) -> Engine:
    """The engine registered as ``name``; ConfigError naming the known ones otherwise."""
    if name not in _ENGINES:
        raise ConfigError(f"no fleet engine {name!r}{did_you_mean(name, _ENGINES)} (engines: {', '.join(_ENGINES)})")
    return _ENGINES[name]()


def _local() -> Engine:
    from ngym.fleet import local

    return local


def _compose() -> Engine:
    from ngym.fleet import compose

    return compose


def _ray() -> Engine:
    from ngym.fleet import ray_engine

    return ray_engine


register_engine("local", _local)
register_engine("compose", _compose)
register_engine("ray", _ray)
