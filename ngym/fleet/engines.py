"""Fleet engines: what runs a fleet's environments (``engine:`` in the fleet file), registered by name.

An engine is anything with ``up(spec, reporter, startup_seconds) -> FleetState`` and ``down(state, timeout)
-> list[str]`` (a module will do): ``up`` starts the environments its way, records each one in the state as it
starts, then calls :func:`ngym.fleet.bringup.finish` (global config, head server, NeMo Gym's servers); ``down``
stops what it runs and calls :func:`ngym.fleet.bringup.stop_processes`. Engines register a loader (imported
when used: Docker's SDK and Ray are heavy).

An engine may instead hand the fleet to another system to run (``kubernetes`` writes manifests for ``kubectl``):
it has ``hand_off(spec) -> list[str]`` (writes what that system needs; the lines ``ngym up`` prints) and
``runner(spec) -> str`` (who runs it, what ``ngym status``/``down`` answer), and no ``up``/``down``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from ngym.errors import ConfigError
from ngym.fleet.bringup import Reporter
from ngym.fleet.spec import FleetSpec
from ngym.fleet.state import FleetState
from ngym.suggest import did_you_mean


class Engine(Protocol):
    """Brings a fleet up and down (see the module's docstring)."""

    def up(self, spec: FleetSpec, reporter: Reporter | None = ..., startup_seconds: float = ...) -> FleetState: ...

    def down(self, state: FleetState, timeout: float = ...) -> list[str]: ...


@runtime_checkable
class HandOff(Protocol):
    """Hands a fleet to another system to run (see the module's docstring)."""

    def hand_off(self, spec: FleetSpec) -> list[str]: ...

    def runner(self, spec: FleetSpec) -> str: ...


_ENGINES: dict[str, Callable[[], Engine | HandOff]] = {}


def register_engine(name: str, loader: Callable[[], Engine | HandOff]) -> None:
    """Make ``engine: NAME`` of a fleet file run by the engine ``loader()`` returns (called when first used)."""
    _ENGINES[name] = loader


def engine(name: str) -> Engine | HandOff:
    """The engine registered as ``name``; ConfigError naming the known ones otherwise."""
    if name not in _ENGINES:
        raise ConfigError(f"no fleet engine {name!r}{did_you_mean(name, _ENGINES)} (engines: {', '.join(_ENGINES)})")
    return _ENGINES[name]()


def running_engine(spec: FleetSpec) -> Engine:
    """The engine that runs ``spec``'s fleet here; ConfigError saying who runs it when its engine hands it off."""
    found = engine(spec.engine)
    if isinstance(found, HandOff):
        raise ConfigError(f"fleet {spec.name!r} runs in {found.runner(spec)}")
    return found


def _local() -> Engine:
    from ngym.fleet import local

    return local


def _compose() -> Engine:
    from ngym.fleet import compose

    return compose


def _ray() -> Engine:
    from ngym.fleet import ray_engine

    return ray_engine


def _kubernetes() -> HandOff:
    from ngym.fleet import kubernetes

    return kubernetes


register_engine("local", _local)
register_engine("compose", _compose)
register_engine("ray", _ray)
register_engine("kubernetes", _kubernetes)
