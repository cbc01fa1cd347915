"""The pluggy plugin manager: hook plugins come from the ``ngym`` entry-point group.

Each hook plugin is loaded on its own: one that fails to import, or implements a hook that does not exist
(a misspelt ``ngym_`` name, caught by ``check_pending``), is recorded as a ``PluginProblem`` naming its
distribution and the reason, and every other plugin keeps working. ``NGYM_STRICT_PLUGINS=1`` turns any
problem into a ``PluginError`` (CI runs that way).

ngym's own plugins (``BUILTIN_PLUGINS``) are registered on every manager, the way datasette registers its
``DEFAULT_PLUGINS``: built-in behaviour goes through the same hooks as third-party behaviour.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from ngym import __version__
from ngym.errors import PluginError
from ngym.plugins import entrypoints, hookspecs
from ngym.plugins.entrypoints import installed_entry_points

HOOK_PLUGIN_GROUP = "ngym"
STRICT_ENV = "NGYM_STRICT_PLUGINS"
#: ngym's own hook plugins, registered on every manager (``entrypoints`` registers the
#: ``ngym.resources_servers`` entry points, built-in environments and third-party ones alike).
BUILTIN_PLUGINS: tuple[ModuleType, ...] = (entrypoints,)


def strict_mode() -> bool:
    """True when ``NGYM_STRICT_PLUGINS`` asks for every broken plugin to be an error."""
    return os.environ.get(STRICT_ENV, "").strip().lower() not in ("", "0", "false", "no")


@dataclass(frozen=True)
class Origin:
    """Where a plugin came from."""

    distribution: str | None
    version: str | None
    entry_point: str | None = None  # "name = value" in its group


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that could not be loaded or registered, and why."""

    plugin: str  # the hook plugin's or the server's name
    distribution: str | None
    version: str | None
    reason: str
    kind: str = "hook plugin"  # or "resources server"

    def line(self) -> str:
        dist = f"{self.distribution} {self.version or ''}".strip() if self.distribution else "no distribution"
        return f"{self.kind} {self.plugin!r} ({dist}): {self.reason}"


def origin_of_entry_point(ep: metadata.EntryPoint) -> Origin:
    dist = ep.dist
    return Origin(
        distribution=dist.metadata["Name"] if dist is not None else None,
        version=dist.version if dist is not None else None,
        entry_point=f"{ep.name} = {ep.value}",
    )


def describe_exception(exc: BaseException) -> str:
    """A one-line reason for a plugin failure."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class NgymPluginManager(pluggy.PluginManager):
    """A ``pluggy.PluginManager`` that records broken plugins instead of failing on the first one."""

    def __init__(self, *, lenient: bool = False) -> None:
        super().__init__("ngym")
        #: Report broken plugins without raising, even in strict mode (``ngym install``/``uninstall`` must work
        #: while a plugin is broken: uninstalling it is how it is fixed).
        self.lenient = lenient
        self.add_hookspecs(hookspecs)
        self.problems: list[PluginProblem] = []
        self.origins: dict[str, Origin] = {}

    def report(self, problem: PluginProblem) -> None:
        """Record a problem; in strict mode raise it at once."""
        self.problems.append(problem)
        if strict_mode() and not self.lenient:
            raise PluginError(f"broken plugin ({STRICT_ENV}=1): {problem.line()}")

    def add_plugin(self, plugin: Any, name: str, origin: Origin | None = None) -> bool:
        """Register one plugin object (module or instance); a misspelt hook rejects it. True when registered."""
        origin = origin or Origin(distribution=None, version=None)
        try:
            self.register(plugin, name=name)
        except Exception as exc:  # pluggy.PluginValidationError (bad hook signature), duplicate name, ...
            self.report(PluginProblem(name, origin.distribution, origin.version, describe_exception(exc)))
            return False
        try:
            self.check_pending()
        except pluggy.PluginValidationError as exc:
            self.unregister(name=name)
            reason = f"implements a hook that does not exist (misspelt?): {exc}"
            self.report(PluginProblem(name, origin.distribution, origin.version, reason))
            return False
        self.origins[name] = origin
        return True

    def load_hook_plugins(self, entry_points: Iterable[metadata.EntryPoint] | None = None) -> None:
        """Import and register every plugin of the ``ngym`` entry-point group, each on its own."""
        for ep in entry_points if entry_points is not None else installed_entry_points(HOOK_PLUGIN_GROUP):
            origin = origin_of_entry_point(ep)
            if self.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
            except Exception as exc:
                self.report(PluginProblem(ep.name, origin.distribution, origin.version, describe_exception(exc)))
                continue
            self.add_plugin(plugin, ep.name, origin)

    def register_builtins(self) -> None:
        for module in BUILTIN_PLUGINS:
            self.add_plugin(module, module.__name__, Origin("ngym", __version__))

    def origin(self, plugin_name: str) -> Origin:
        return self.origins.get(plugin_name, Origin(distribution=None, version=None))

    def hooks_of(self, plugin: Any) -> list[str]:
        """Names of the hooks ``plugin`` implements."""
        return sorted(caller.name for caller in self.get_hookcallers(plugin) or [])


def make_plugin_manager(
    *,
    load_entry_points: bool = True,
    plugins: Iterable[tuple[str, Any]] = (),
    builtins: bool = True,
    lenient: bool = False,
) -> NgymPluginManager:
    """A fresh manager: ngym's built-in plugins, the installed hook plugins, then ``plugins`` (name, object).

    Tests pass ``load_entry_points=False`` and their inline plugins; ``lenient``: see ``NgymPluginManager``.
    """
    pm = NgymPluginManager(lenient=lenient)
    if builtins:
        pm.register_builtins()
    if load_entry_points:
        pm.load_hook_plugins()
    for name, plugin in plugins:
        pm.add_plugin(plugin, name)
    return pm


@functools.cache
def get_plugin_manager() -> NgymPluginManager:
    """The process-wide plugin manager with every installed hook plugin loaded."""
    return make_plugin_manager()
