"""The registry of resources servers: who registered what, validated at registration.

Plugins register servers through the ``ngym_register_resources_servers(register)`` hook::

    @ngym.hookimpl
    def ngym_register_resources_servers(register):
        register.add(MyServer, name="my_tool", domain="agent")

The ``ngym.resources_servers`` entry-point group (``name = "module:Class"``) is registered through that same
hook by ngym's built-in ``entrypoints`` plugin, lazily: an entry point is a name and a target until the
class is used or inspected, so listing imports nothing. Every registration is checked by the same rules
(``validate_server_class``): a ``domain`` that is a member of ``Domain`` (an invalid one names the valid
values), a config class that validates with its defaults, a real ``verify`` and a unique name (a clash
names both distributions).
"""

from __future__ import annotations

import contextlib
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ngym.config import default_instance_name, defines_resources_server, environment_config_fields, module_file
from ngym.domain import Domain
from ngym.errors import EnvironmentNotFound, PluginError
from ngym.plugins.entrypoints import forget_installed
from ngym.plugins.manager import (
    NgymPluginManager,
    Origin,
    PluginProblem,
    describe_exception,
    get_plugin_manager,
    origin_of_entry_point,
    strict_mode,
)
from ngym.suggest import did_you_mean

if TYPE_CHECKING:
    from ngym.server.pipeline.resources import BaseResourcesServerConfig, SimpleResourcesServer

NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
OK, BROKEN = "ok", "broken"


@dataclass(frozen=True)
class ServerSpec:
    """A validated registration: what ``register.add`` produced."""

    name: str
    server_class: type[SimpleResourcesServer]
    domain: Domain
    config_class: type[BaseResourcesServerConfig]
    distribution: str | None
    version: str | None
    description: str

    @property
    def target(self) -> str:
        return f"{self.server_class.__module__}:{self.server_class.__qualname__}"


@dataclass
class ServerEntry:
    """A registered server, loaded or not yet: the name, where it comes from, and its spec once validated."""

    name: str
    target: str  # module:Class
    origin: Origin
    declared_domain: str | None = None
    declared_description: str | None = None
    server_class: type | None = None  # set when registered with the class itself
    spec: ServerSpec | None = None
    error: str | None = None
    clash: str | None = None  # set when another distribution registered the same name
    #: the environment's own folder (its configs/ and data/), when it is not its module's folder: a plugin that
    #: serves many environments from one module (verifiers', OpenEnv's) gives each its own
    folder: Path | None = None

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def distribution(self) -> str | None:
        return self.origin.distribution

    @property
    def version(self) -> str | None:
        return self.origin.version

    def package_dir(self) -> Path | None:
        """The environment's folder (its configs/ and data/ sit there): the one it was registered with, else its
        module's folder, found without importing it."""
        if self.folder is not None:
            return self.folder
        path = module_file(self.module)
        return path.parent if path is not None else None

    def config_file(self) -> Path | None:
        folder = self.package_dir()
        if folder is None:
            return None
        # configs/<name>.yaml; for an environment registered under another name (NeMo Gym's installed with
        # `ngym install --as`), the one named after its folder, else the first that defines a resources server
        for stem in dict.fromkeys((self.name, folder.name)):
            candidate = folder / "configs" / f"{stem}.yaml"
            if candidate.is_file():
                return candidate
        return next((p for p in sorted((folder / "configs").glob("*.yaml")) if defines_resources_server(p)), None)

    def config_fields(self, overrides: list[str] | None = None, *, resolve: bool = True) -> dict[str, Any]:
        """The fields of the first resources-server instance in ``configs/<name>.yaml`` (empty when none),
        after dotted ``overrides`` of the YAML tree (``inst.resources_servers.impl.port=9000``); ``resolve=False``
        keeps ``${...}`` as written."""
        config = self.config_file()
        if config is None:
            return {}
        return environment_config_fields(config, overrides, resolve=resolve)


class RegistrationError(PluginError):
    """A server broke a registration rule."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name, self.message = name, message


class Register:
    """What ``ngym_register_resources_servers`` receives; records which distribution registered what."""

    def __init__(self, registry: Registry, origin: Origin) -> None:
        self._registry = registry
        self._origin = origin

    def add(
        self,
        server: type[SimpleResourcesServer] | str,
        *,
        name: str | None = None,
        domain: Domain | str | None = None,
        description: str | None = None,
        folder: Path | str | None = None,
    ) -> None:
        """Register a server under ``name`` (default: the class name in snake_case).

        ``server`` is the class, validated now, or a ``"module:Class"`` string, imported and validated when
        the server is used or inspected (keeps a plugin module that registers many servers cheap to load).
        ``folder`` is where the environment's ``configs/`` and ``data/`` (``example.jsonl``,
        ``example_rollouts.jsonl``) are, when that is not its module's folder: ``ngym validate``, ``profile``,
        ``rollout`` and ``containerize --run`` read its examples there.
        Raises ``PluginError`` when a rule is broken.
        """
        if isinstance(server, str):
            if ":" not in server:
                message = f"{server!r}: a server target is 'module:Class'"
                # named: a RegistrationError, reported against this server while the others still register
                raise RegistrationError(name, message) if name else PluginError(message)
            if not name:
                raise PluginError(f"{server}: a server registered by its 'module:Class' target needs name=")
            entry = ServerEntry(name, server, self._origin, _domain_text(domain), description)
        else:
            name = name or default_instance_name(server)
            target = f"{getattr(server, '__module__', '?')}:{getattr(server, '__qualname__', server)}"
            entry = ServerEntry(name, target, self._origin, _domain_text(domain), description, server_class=server)
        if not NAME_PATTERN.match(name):
            raise RegistrationError(
                name, f"{name!r}: a server name is letters, digits, '_', '-' or '.', starting with a letter"
            )
        entry.folder = Path(folder) if folder is not None else None
        self._registry._add(entry)
        if entry.server_class is not None:
            self._registry.load(entry)
            if entry.error is not None:
                raise RegistrationError(name, entry.error)

    def add_entry_point(self, ep: metadata.EntryPoint) -> None:
        """Register an ``ngym.resources_servers`` entry point (lazily), attributed to its distribution.

        A failure is reported against the entry point's distribution and does not stop the caller.
        """
        with self.attributed(origin_of_entry_point(ep)):
            try:
                self.add(ep.value, name=ep.name)
            except RegistrationError as exc:
                self.report(exc.name, exc.message)

    def report(self, name: str, reason: str) -> None:
        """Record that server ``name`` of the current distribution could not be registered (strict: raise)."""
        problem = PluginProblem(name, self._origin.distribution, self._origin.version, reason, "resources server")
        self._registry.pm.report(problem)

    @contextlib.contextmanager
    def attributed(self, origin: Origin) -> Iterator[None]:
        previous, self._origin = self._origin, origin
        try:
            yield
        finally:
            self._origin = previous


def _domain_text(domain: Domain | str | None) -> str | None:
    return domain.value if isinstance(domain, Domain) else domain


@dataclass
class Registry:
    """Every registered server by name, plus the problems met while registering."""

    pm: NgymPluginManager
    entries: dict[str, ServerEntry] = field(default_factory=dict)
    clashes: list[ServerEntry] = field(default_factory=list)

    @property
    def problems(self) -> list[PluginProblem]:
        return self.pm.problems

    def _add(self, entry: ServerEntry) -> None:
        existing = self.entries.get(entry.name)
        if existing is None:
            self.entries[entry.name] = entry
            return
        first = f"{existing.distribution or 'unknown distribution'} ({existing.target})"
        second = f"{entry.distribution or 'unknown distribution'} ({entry.target})"
        message = f"name clash: {entry.name!r} is registered by both {first} and {second}"
        existing.clash = entry.clash = message
        self.clashes.append(entry)
        raise RegistrationError(entry.name, message)

    def run_hooks(self) -> None:
        """Call every plugin's ``ngym_register_resources_servers``, one plugin at a time."""
        for impl in self.pm.hook.ngym_register_resources_servers.get_hookimpls():
            origin = self.pm.origin(impl.plugin_name)
            register = Register(self, origin)
            try:
                impl.function(*[{"register": register}[arg] for arg in impl.argnames])
            except RegistrationError as exc:
                register.report(exc.name, exc.message)
            except Exception as exc:
                if strict_mode() and isinstance(exc, PluginError):
                    raise  # a problem already reported in strict mode
                reason = f"ngym_register_resources_servers failed: {describe_exception(exc)}"
                self.pm.report(PluginProblem(impl.plugin_name, origin.distribution, origin.version, reason))

    def load(self, entry: ServerEntry) -> ServerSpec | None:
        """Import (if needed) and validate one entry; the result is kept on the entry."""
        if entry.spec is not None or entry.error is not None:
            return entry.spec
        try:
            cls = entry.server_class if entry.server_class is not None else _import_target(entry.target)
            fields = entry.config_fields() if entry.server_class is None else {}
            # Imported here, not at the top: the rules import the server runtime (FastAPI, ~0.4 s), which a
            # warm `ngym list` (every row from its cache) never needs. Measured: bench/bench_list.py.
            from ngym.server.pipeline.rules import validate_server_class

            domain, config_class = validate_server_class(
                cls, name=entry.name, domain=entry.declared_domain, config_fields=fields
            )
        except PluginError as exc:
            entry.error = str(exc)
            return None
        except Exception as exc:
            entry.error = f"{entry.name}: cannot load {entry.target}: {describe_exception(exc)}"
            return None
        server_class = cast("type[SimpleResourcesServer]", cls)  # validate_server_class checked it
        # a NeMo Gym environment says what it is in its YAML's `description:`, not in a docstring
        description = entry.declared_description or server_class.describe() or str(fields.get("description") or "")
        entry.spec = ServerSpec(
            entry.name, server_class, domain, config_class, entry.distribution, entry.version, description
        )
        return entry.spec

    def entry(self, name: str) -> ServerEntry:
        if name not in self.entries:
            known = ", ".join(sorted(self.entries)) or "none installed"
            hint = did_you_mean(name, self.entries)
            raise EnvironmentNotFound(f"no environment named {name!r} is installed{hint} (installed: {known})")
        entry = self.entries[name]
        if entry.clash is not None:
            raise PluginError(entry.clash)
        return entry

    def get(self, name: str) -> ServerSpec:
        """The validated spec of ``name`` (imports it); ``PluginError`` saying why when it is broken."""
        entry = self.entry(name)
        spec = self.load(entry)
        if spec is None:
            raise PluginError(
                f"environment {name!r} ({entry.distribution or 'no distribution'}) is broken: {entry.error}"
            )
        return spec

    def all_entries(self) -> list[ServerEntry]:
        """Every entry, clashing duplicates included, by name."""
        return sorted([*self.entries.values(), *self.clashes], key=lambda e: (e.name, e.distribution or ""))


def _import_target(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def build_registry(pm: NgymPluginManager | None = None) -> Registry:
    """A registry filled by every plugin's ``ngym_register_resources_servers`` (strict mode raises)."""
    registry = Registry(pm or get_plugin_manager())
    registry.run_hooks()
    return registry


_registry: Registry | None = None


def get_registry() -> Registry:
    """The process-wide registry (built on first use)."""
    global _registry
    if _registry is None:
        _registry = build_registry()
    return _registry


def reset_registry() -> None:
    """Forget the process-wide registry and plugin manager (after installing or uninstalling a plugin)."""
    global _registry
    _registry = None
    forget_installed()
    get_plugin_manager.cache_clear()  # plugin commands are computed per manager: a new one recomputes them
