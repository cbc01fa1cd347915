"""What is this target? One answer for every command: ``resolve(target)`` → one ``Environment``.

A target is what a user types after ``ngym run``, ``validate``, ``profile``, ``rollout``, ``containerize``
or passes to ``ngym.testing.app_for``:

- an installed **name** (``example_single_tool_call``): an ``ngym.resources_servers`` entry point or a server
  a hook plugin registered (a name wins over a same-named folder in the current directory);
- a **config file** (``configs/x.yaml``): its first ``resources_servers`` instance (``ngym run`` serves every
  one of them: ``environments_in_configs``);
- an environment **folder**: its ``configs/<folder name>.yaml`` (else its first config), else its ``app.py``;
  a ``pyproject.toml`` there names the distribution;
- a **Python file** ``app.py`` or ``app.py:Class``, or a ``package.module:Class`` target.

A running server's **URL** is not an environment: commands that can drive one check ``is_url`` first.

A target written as a path (``./x``, ``../x``, ``/x``, ``~/x``, ``a/b``, ``x.py``, ``x.yaml``: ``is_path_shaped``)
names a file or folder only: when it is not there, that is one error line, never the installed environment ``x``.

An installed name is resolved by the registry (``ngym.plugins.registry``) and nothing else, so a name means
the same thing to every command, with the same registration rules, whether or not hook plugins are installed.
With none installed (the usual case in an image) the registry holds only the ``ngym.resources_servers`` entry
points and costs ~1 ms over reading them (no hook plugin is imported); a hook plugin may register servers (or
the same name: a clash is an error).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngym.config import InstanceConfig, instances_in_tree, module_file, resolve_entrypoint, server_fields
from ngym.config_tree import ConfigTree, load_tree
from ngym.domain import Domain
from ngym.errors import ConfigError, PluginError
from ngym.plugins.entrypoints import installed_entry_points
from ngym.plugins.manager import HOOK_PLUGIN_GROUP
from ngym.plugins.registry import ServerEntry, get_registry

if TYPE_CHECKING:
    from ngym.server.pipeline.app import ServeSpec
    from ngym.server.pipeline.resources import BaseResourcesServerConfig, SimpleResourcesServer

# The server runtime (FastAPI, ~0.5 s to import) is imported where a class is loaded or a spec made, not at the
# top: naming an environment must stay cheap for callers that never serve it in this process (the Locust
# locustfile resolves names at test start, and Locust's -t timer is already running then).

_MODULE_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass
class Environment:
    """One environment, however it was named: what serving, validating or packaging it needs."""

    name: str
    target: str  #: ``module:Class``, or a Python file (``/abs/app.py`` or ``/abs/app.py:Class``)
    folder: Path | None  #: where its ``configs/`` and ``data/`` are
    config: Path | None = None  #: the YAML its ``fields`` come from
    fields: dict[str, Any] = field(default_factory=dict)  #: the instance's config fields (no ``entrypoint``)
    distribution: str | None = None
    version: str | None = None
    registered_domain: str | None = None  #: the domain its registration declared, if any
    #: why its config's fields cannot be resolved (a ``${...}`` nothing sets): serving it fails with this, while
    #: what needs no fields (its folder, its own tests, its image) still works, as under NeMo Gym
    config_error: str | None = None
    #: the config tree its ``fields`` were read from, as loaded (files and overrides): ``ngym run`` passes it on
    #: to what needs the whole tree (the global config) instead of merging the files again
    tree: ConfigTree | None = field(default=None, repr=False, compare=False)

    @cached_property
    def server_class(self) -> type[SimpleResourcesServer]:
        """The server class (imported on first use)."""
        from ngym.server.pipeline.app import load_server_class

        return load_server_class(self.target)

    @cached_property
    def registration(self) -> tuple[Domain, type[BaseResourcesServerConfig]]:
        """The registration rules' answer for the class with this environment's config fields: its domain and
        config class (imports the class; ``PluginError`` naming the rule it breaks). The one place a resolved
        environment is validated: ``domain``, ``ngym validate`` and the other commands read it from here."""
        from ngym.server.pipeline.rules import validate_server_class

        return validate_server_class(
            self.server_class, name=self.name, domain=self.registered_domain, config_fields=self.fields
        )

    @cached_property
    def domain(self) -> Domain:
        """The domain, decided by the registration rules (imports the class; ``PluginError`` when broken)."""
        try:
            domain, _config_class = self.registration
        except PluginError as exc:
            dist = self.distribution or "no distribution"
            raise PluginError(f"environment {self.name!r} ({dist}) is broken: {exc}") from None
        return domain

    def check_config_domain(self) -> None:
        """``ConfigError`` naming the YAML file when its ``domain:`` is no domain: the file is what to fix, and
        the registration rules, which find it later, know only the class."""
        if "domain" not in self.fields or self.fields["domain"] is None:
            return
        try:
            Domain.parse(self.fields["domain"])
        except ValueError as exc:
            where = f"{self.config}: " if self.config is not None else ""
            raise ConfigError(f"{where}{self.name}: {exc}") from None

    def serve_spec(self, **fields: Any) -> ServeSpec:
        """What ``ngym run`` serves: the target with the config fields (``fields`` on top)."""
        from ngym.server.pipeline.app import ServeSpec

        if self.config_error is not None:
            raise ConfigError(self.config_error)
        app_plugins = bool(installed_entry_points(HOOK_PLUGIN_GROUP))  # only hook plugins can extend apps
        loaded = self.__dict__.get("server_class")  # the cached_property's value, when the class was imported
        fields = {**self.fields, **fields}
        return ServeSpec(self.target, self.name, fields, app_plugins=app_plugins, server_class=loaded)

    def data_file(self, name: str) -> Path | None:
        """``data/<name>`` in the environment's folder, when it exists."""
        path = self.folder / "data" / name if self.folder is not None else None
        return path if path is not None and path.is_file() else None


def is_url(target: str) -> bool:
    """Whether ``target`` is a running server's URL rather than an environment to start."""
    return target.startswith(("http://", "https://"))


def is_path_shaped(target: str) -> bool:
    """Whether ``target`` is written as a path (``./x``, ``../x``, ``/x``, ``~/x``, ``a/b``, ``x.py``, ``x.yaml``):
    such a target names a file or folder and never falls back to an installed environment of the same name."""
    file_part = target.partition(":")[0]  # ``app.py:Class`` is the file app.py (``pkg.module:Class`` is no path)
    return (
        target in (".", "..", "~")
        or target.startswith(("./", "../", "/", "~"))
        or "/" in target
        or os.sep in target
        or file_part.endswith((".py", ".yaml", ".yml"))
    )


def _no_such_path(target: str, path: Path) -> str:
    """The one line for a path-shaped target that is not there (naming the installed environment it is not)."""
    message = f"{target}: no such file or folder ({path.absolute()})"
    name = path.name
    if name and not is_path_shaped(name) and _is_installed(name):
        message += f"; to use the installed environment {name!r}, give its name without the path: {name}"
    return message


def resolve(target: str, overrides: list[str] | None = None) -> Environment:
    """The environment ``target`` names (see the module's docstring); dotted ``overrides`` apply to the YAML.

    ``EnvironmentNotFound`` (listing what is installed) for an unknown name, ``ConfigError`` for a path that
    is not an environment, ``PluginError`` for a name two distributions register.
    """
    overrides = overrides or []
    if is_url(target):
        raise ConfigError(f"{target} is a running server's URL; this needs an environment (name, folder or config)")
    file_part, colon, _attr = target.partition(":")
    if colon and _MODULE_TARGET.match(target) and not file_part.endswith(".py"):
        source = module_file(file_part)
        return Environment(target.rsplit(":", 1)[-1].rsplit(".", 1)[-1], target, source.parent if source else None)
    path = Path(target).expanduser()
    if not is_path_shaped(target) and (not path.exists() or _is_installed(target)):
        return installed(target, overrides)
    if not path.exists() and not Path(file_part).expanduser().exists():
        raise ConfigError(_no_such_path(target, path))
    if path.is_dir():
        return _from_folder(path.resolve(), overrides)
    if file_part.endswith(".py"):
        file = Path(file_part).resolve()
        if not file.is_file():
            raise ConfigError(f"{target}: file not found")
        resolved = f"{file}:{target.partition(':')[2]}" if ":" in target else str(file)
        return Environment(file.parent.name, resolved, file.parent)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return environments_in_configs([path], overrides)[0]
    raise ConfigError(f"{target}: not an installed environment, an environment folder, a config file or app.py")


def environments_in_configs(
    paths: list[Path],
    overrides: list[str] | None = None,
    on_skip: Callable[[InstanceConfig], None] | None = None,
    *,
    tree: ConfigTree | None = None,
) -> list[Environment]:
    """Every ``resources_servers`` instance of the merged config files (``ngym run a.yaml b.yaml``); the other
    instances (agents, models) go to ``on_skip``. ``tree``: those files already loaded with ``overrides``."""
    if tree is None or not tree.is_of(paths, overrides):
        tree = load_tree(paths, overrides or [])
    found: list[Environment] = []
    for instance in instances_in_tree(tree):
        if instance.server_type != "resources_servers":
            if on_skip is not None:
                on_skip(instance)
            continue
        entrypoint = resolve_entrypoint(instance)
        folder = Path(entrypoint).parent if entrypoint.endswith(".py") else instance.entrypoint_base()
        fields = {k: v for k, v in instance.fields.items() if k != "entrypoint"}
        found.append(Environment(instance.name, entrypoint, folder, instance.source, fields, tree=tree))
    if not found:
        shown = ", ".join(str(p) for p in paths)
        raise ConfigError(f"{shown}: no resources_servers instance")
    return found


def installed(name: str, overrides: list[str] | None = None) -> Environment:
    """The installed environment ``name`` (``EnvironmentNotFound`` lists the installed ones)."""
    entry = _entry(name)
    config = entry.config_file()
    # loaded once: its fields are read from it, and ngym run passes it on to the global config
    tree = load_tree([config], overrides or []) if config is not None else None
    try:
        fields, config_error = (server_fields(tree) if tree is not None else {}), None
    except ConfigError as exc:
        fields, config_error = server_fields(tree, resolve=False) if tree is not None else {}, str(exc)
    return Environment(
        name=entry.name,
        target=entry.target,
        folder=entry.package_dir(),
        config=config,
        fields=fields,
        distribution=entry.distribution,
        version=entry.version,
        registered_domain=entry.declared_domain,
        config_error=config_error,
        tree=tree,
    )


def installed_names() -> list[str]:
    """Every installed environment's name without a clash, sorted (no environment module is imported)."""
    return sorted(name for name, entry in get_registry().entries.items() if entry.clash is None)


def _entry(name: str) -> ServerEntry:
    """The registry's entry for ``name`` (``EnvironmentNotFound``; ``PluginError`` for a clash)."""
    return get_registry().entry(name)


def _is_installed(name: str) -> bool:
    return name in get_registry().entries


def _from_folder(folder: Path, overrides: list[str]) -> Environment:
    """An environment folder: its config (``configs/<folder>.yaml`` first), else its ``app.py``."""
    configs = sorted((folder / "configs").glob("*.y*ml"))
    preferred = [c for c in configs if c.stem == folder.name] or configs
    if preferred:
        environment = environments_in_configs([preferred[0]], overrides)[0]
        environment.folder = folder
    elif (folder / "app.py").is_file():
        environment = Environment(folder.name, str(folder / "app.py"), folder)
    else:
        raise ConfigError(f"{folder}: no configs/*.yaml and no app.py: not an environment folder")
    project = _project(folder)
    if project is not None:
        environment.distribution = project.get("name")
        environment.version = str(project["version"]) if project.get("version") else None
    return environment


def _project(folder: Path) -> dict[str, Any] | None:
    """The ``[project]`` table of the folder's ``pyproject.toml`` (None when there is none or it is unreadable)."""
    try:
        project = tomllib.loads((folder / "pyproject.toml").read_text()).get("project")
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return project if isinstance(project, dict) else None


__all__ = [
    "Environment",
    "environments_in_configs",
    "installed",
    "installed_names",
    "is_path_shaped",
    "is_url",
    "resolve",
]
