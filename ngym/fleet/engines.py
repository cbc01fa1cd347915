"""Fleet engines: what runs a fleet's environments (``engine:`` in the fleet file), registered by name.

An engine is anything with ``up(spec, reporter, startup_seconds) -> FleetState`` and ``down(state, timeout)
-> list[str]`` (a module will do): ``up`` starts the environments its way, records each one in the state as it
starts, then calls :func:`ngym.fleet.bringup.finish` (global config, head server, NeMo Gym's servers); ``down``
stops what it runs and calls :func:`ngym.fleet.bringup.stop_processes`. Engines register a loader (imported
when used: Docker's SDK and Ray are heavy).

An engine may instead hand the fleet to another system to run (``kubernetes`` writes manifests for ``kubectl``):
it has ``hand_off(spec) -> list[str]`` (writes what that system needs; the lines ``ngym up`` prints) and
``runner(spec) -> str`` (who runs it, what ``ngym status``/``down`` answer), and no ``up``/``down``.

A plugin adds an engine with the ``ngym_register_fleet_engines`` hook::

    @hookimpl
    def ngym_register_fleet_engines(register: FleetEngines) -> None:
        register.add("nomad", "my_plugin.nomad")  # a module (or "module:attribute"), imported when used

``engine:`` in a fleet file is checked against these names when the file is read (an unknown one is one error
listing the registered engines).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ngym.errors import ConfigError, PluginError
from ngym.suggest import did_you_mean

if TYPE_CHECKING:  # the engine protocols' annotations only: ngym.fleet.spec asks this module for the names
    from ngym.fleet.bringup import Reporter
    from ngym.fleet.spec import FleetSpec
    from ngym.fleet.state import FleetState


class Engine(Protocol):
    """Brings a fleet up and down (see the module's docstring)."""

    def up(self, spec: FleetSpec, reporter: Reporter | None = ..., startup_seconds: float = ...) -> FleetState: ...

    def down(self, state: FleetState, timeout: float = ...) -> list[str]: ...


@runtime_checkable
class HandOff(Protocol):
    """Hands a fleet to another system to run (see the module's docstring)."""

    def hand_off(self, spec: FleetSpec) -> list[str]: ...

    def runner(self, spec: FleetSpec) -> str: ...


Loader = Callable[[], "Engine | HandOff"]
#: ngym's own engines: each module is the engine
BUILTIN_ENGINES = {
    "local": "ngym.fleet.local",
    "compose": "ngym.fleet.compose",
    "ray": "ngym.fleet.ray_engine",
    "kubernetes": "ngym.fleet.kubernetes",
}


class FleetEngines:
    """The registered fleet engines, by name (what the ``ngym_register_fleet_engines`` hook receives)."""

    def __init__(self) -> None:
        self._loaders: dict[str, Loader] = {}

    def add(self, name: str, loader: str | Loader) -> None:
        """Make ``engine: NAME`` run by the engine ``loader()`` returns, or the module (``"module"``) or object
        (``"module:attribute"``) it names, imported when first used; a name registered twice is a ``PluginError``."""
        if not name or name in self._loaders:
            raise PluginError(f"fleet engine {name!r}: " + ("registered twice" if name else "an empty name"))
        self._loaders[name] = _importer(loader) if isinstance(loader, str) else loader

    def names(self) -> list[str]:
        return list(self._loaders)

    def load(self, name: str) -> Engine | HandOff:
        """The engine registered as ``name``; ConfigError naming the registered ones otherwise."""
        if name not in self._loaders:
            raise ConfigError(unknown_engine(name, self.names()))
        return self._loaders[name]()


def unknown_engine(name: str, known: list[str]) -> str:
    return f"no fleet engine {name!r}{did_you_mean(name, known)} (engines: {', '.join(known)})"


def _importer(target: str) -> Loader:
    module, colon, attribute = target.partition(":")
    if not module or (colon and not attribute):
        raise PluginError(f"fleet engine {target!r}: name it as 'module' or 'module:attribute'")

    def load() -> Any:
        found = importlib.import_module(module)
        return getattr(found, attribute) if attribute else found

    return load


def registered() -> FleetEngines:
    """ngym's engines (``local``, ``compose``, ``ray``, ``kubernetes``), then every plugin's."""
    from ngym.plugins.manager import get_plugin_manager

    engines = FleetEngines()
    for name, module in BUILTIN_ENGINES.items():
        engines.add(name, module)
    get_plugin_manager().hook.ngym_register_fleet_engines(register=engines)
    return engines


def engine(name: str) -> Engine | HandOff:
    """The engine registered as ``name``; ConfigError naming the registered ones otherwise."""
    return registered().load(name)


def running_engine(spec: FleetSpec) -> Engine:
    """The engine that runs ``spec``'s fleet here; ConfigError saying who runs it when its engine hands it off."""
    found = engine(spec.engine)
    if isinstance(found, HandOff):
        raise ConfigError(f"fleet {spec.name!r} runs in {found.runner(spec)}")
    return found
