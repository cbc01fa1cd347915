"""The ``ngym_`` hooks a plugin may implement (mark implementations with ``ngym.hookimpl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

    from ngym.fleet.engines import FleetEngines
    from ngym.plugins.registry import Register
    from ngym.plugins.sources import InstallSources
    from ngym.server.pipeline.resources import SimpleResourcesServer
    from ngym.server.sessions.store import SessionStore

hookspec = pluggy.HookspecMarker("ngym")


@hookspec
def ngym_register_resources_servers(register: Register) -> None:
    """Register resources servers: call ``register.add(ServerClass, name=..., domain=...)`` once per server.

    Called once per process, when the registry is first needed (``ngym list``, ``ngym run NAME``,
    ``ngym validate``). ``register.add`` validates at once (domain, config class, ``verify``, unique name)
    and raises ``PluginError``; the registry reports it against your distribution. Servers declared in the
    ``ngym.resources_servers`` entry-point group are registered through this same hook by ngym's built-in
    ``entrypoints`` plugin.
    """


@hookspec
def ngym_register_commands(cli: click.Group) -> None:
    """Add commands to the ``ngym`` CLI: decorate functions with ``@cli.command()``.

    Called when the CLI lists or looks up a command that is not one of ngym's own.
    """


@hookspec
def ngym_session_store(url: str, server: SimpleResourcesServer) -> SessionStore | None:
    """Return a session store for ``url`` (e.g. ``redis://...``) if this plugin handles that scheme, else None.

    Called when a server starts with ``session_store`` (config) or ``NGYM_SESSION_STORE`` set to something
    other than ``memory``. ``server`` gives the TTL, the bound and ``session_state_model``.
    """


@hookspec
def ngym_extend_app(app: Any, server: SimpleResourcesServer) -> None:
    """Add routes or middleware to every resources server's app, after the server built it."""


@hookspec(firstresult=True)
def ngym_profile_scenario(name: str) -> Any:
    """Return the load-test scenario of environment ``name``, or None to keep the default.

    Called once per ``ngym profile`` run (and by ``loadtests/locustfile.py``); the first non-None answer wins.
    A scenario is an object with ``run(session, row) -> dict | None`` (``ngym.profiling.scenario.Scenario``):
    it performs one whole rollout for one dataset row through ``session.post(path, body)``, which carries
    the rollout's session cookie and records every request in Locust's statistics. The default replays the
    row's recorded rollout: seed_session, its function calls in order, verify, close_session.
    """


@hookspec
def ngym_register_install_sources(register: InstallSources) -> None:
    """Register an ecosystem ``ngym install <prefix>:<what>`` installs from: ``register.add(InstallSource(...))``.

    Called when ``ngym install``, ``ngym uninstall`` or ``ngym list --available`` runs. An ``InstallSource``
    (``ngym.plugin_api``) names its prefix and the functions that install, list and (for environments kept
    outside pip) uninstall; keep this module light and import the heavy parts inside those functions. A prefix
    two plugins register is an error naming both.
    """


@hookspec
def ngym_register_fleet_engines(register: FleetEngines) -> None:
    """Register fleet engines (``engine: NAME`` in a fleet file): ``register.add(NAME, "my_plugin.engine")``.

    An engine has ``up(spec, reporter, startup_seconds)`` and ``down(state, timeout)``, or hands the fleet to
    another system (``hand_off(spec)``, ``runner(spec)``): ``ngym.fleet.engines``. Called when a fleet file is
    read and when ``ngym up``/``status``/``down`` pick its engine; name the engine's module, imported when used.
    """
