"""NeMo Gym-shaped YAML config: loading, ``key=value`` overrides, and resources-server instances.

Shape: ``<instance name>: {<server type>: {<implementation>: {entrypoint, domain, host, port, ...fields}}}``
with server type ``resources_servers`` | ``responses_api_agents`` | ``responses_api_models``. ``ngym run``
serves the ``resources_servers`` instances. An ``entrypoint`` is a Python file resolved against the folder
holding the YAML, or that folder's parent when the YAML sits in a ``configs/`` folder (NeMo Gym's layout:
``resources_servers/my_tool/app.py`` beside ``resources_servers/my_tool/configs/my_tool.yaml``); it may
also be ``package.module:Class``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ngym.config_tree import CONFIG_PATHS_KEY as _CONFIG_PATHS_KEY
from ngym.config_tree import SERVER_TYPES, ConfigTree, load_tree
from ngym.errors import ConfigError


@dataclass
class InstanceConfig:
    """One resources-server instance from a config: its name, implementation, fields and where it came from."""

    name: str
    implementation: str
    fields: dict[str, Any]
    config_dir: Path | None = None
    source: Path | None = None
    server_type: str = "resources_servers"
    extra: dict[str, Any] = field(default_factory=dict)

    def entrypoint_base(self) -> Path | None:
        if self.config_dir is None:
            return None
        return self.config_dir.parent if self.config_dir.name == "configs" else self.config_dir


def split_overrides(args: list[str]) -> tuple[list[Path], list[str]]:
    """Separate config paths from ``key=value`` overrides; ``+config_paths=[a,b]`` (Hydra form) adds paths."""
    paths: list[Path] = []
    overrides: list[str] = []
    for arg in args:
        if "=" not in arg:
            paths.append(Path(arg))
            continue
        key, _, value = arg.lstrip("+").partition("=")
        if key == _CONFIG_PATHS_KEY:
            paths.extend(Path(p.strip().strip("'\"")) for p in value.strip().strip("[]").split(",") if p.strip())
        else:
            overrides.append(f"{key}={value}")
    return paths, overrides


def apply_overrides(tree: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply dotted ``a.b.c=value`` overrides (values parsed as YAML scalars/lists, like Hydra)."""
    if not overrides:
        return tree
    # Here, not at the top: OmegaConf costs ~0.1 s to import, and only overrides need it.
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(OmegaConf.create(tree), OmegaConf.from_dotlist(overrides))
        return OmegaConf.to_container(merged, resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise ConfigError(f"bad override {overrides}: {exc}") from None


def instances_from_files(paths: list[Path], overrides: list[str], *, resolve: bool = True) -> list[InstanceConfig]:
    """Every server instance of the merged config files (NeMo Gym's tree: ``ngym.config_tree``), overrides
    applied: ``instances_in_tree`` of ``load_tree(paths, overrides)``."""
    return instances_in_tree(load_tree(paths, overrides), resolve=resolve)


def instances_in_tree(config: ConfigTree, *, resolve: bool = True) -> list[InstanceConfig]:
    """Every server instance of a loaded tree (a caller that needs the tree again passes the one it loaded);
    a ``resources_servers`` instance's fields have every ``${...}`` resolved (ngym serves those).

    As in NeMo Gym, a top-level key is a server instance only when its value is a mapping with a server-type
    key; any other (``judge_base_url: null``, ``responses_create_params: {...}``) is a value the tree's
    interpolations may use. A model or agent instance NeMo Gym would not start (no single implementation) is
    skipped, as NeMo Gym skips it; a malformed resources-server instance is an error, since it is what ngym
    would serve. ``resolve=False`` leaves every ``${...}`` as written (to look at a config's shape)."""
    instances = []
    for name, body in config.top_level():
        if not config.is_mapping(body):
            continue
        server_types = [key for key in body if key in SERVER_TYPES]
        if not server_types:
            continue  # a value, not an instance
        source = config.origin.get(name)
        where = f"{source or '?'}: {name}"
        if len(server_types) > 1:
            raise ConfigError(f"{where}: an instance has one server type, this one has {', '.join(server_types)}")
        server_type = server_types[0]
        implementations = config.child(body, server_type)
        implementation: Any = ""
        node: Any = None
        valid = False
        if config.is_mapping(implementations) and len(implementations) == 1:
            implementation, node = next(config.items(implementations))
            valid = config.is_mapping(node) or node is None
        if not valid:
            if server_type != "resources_servers":
                continue  # NeMo Gym's "almost-server": not started
            raise ConfigError(f"{where}.{server_type} must map one implementation to its fields")
        if resolve and server_type == "resources_servers" and node is not None:
            fields = config.resolved(node, where)
        else:
            fields = config.plain_of(node) if node is not None else {}
        instances.append(
            InstanceConfig(
                name=name,
                implementation=str(implementation),
                fields=dict(fields or {}),
                config_dir=source.parent if source else None,
                source=source,
                server_type=server_type,
            )
        )
    return instances


CACHE_ENV = "NGYM_CACHE_DIR"


def cache_dir() -> Path:
    """ngym's cache folder: ``$NGYM_CACHE_DIR``, else ``$XDG_CACHE_HOME/ngym``, else ``~/.cache/ngym``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    return cache_root()


def cache_root() -> Path:
    """The machine's ngym cache, ``$XDG_CACHE_HOME/ngym``, else ``~/.cache/ngym``: what is made once per machine and
    reused (NeMo Gym's wheel, the fleet's and the test suites' virtualenvs), whatever ``$NGYM_CACHE_DIR`` says.
    Pointing ``XDG_CACHE_HOME`` at an empty folder starts from nothing (pip's cache moves with it)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ngym"


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def default_instance_name(cls: type) -> str:
    """The instance name of a class run without a config: ``WeatherResourcesServer`` → ``weather_resources_server``."""
    return _SNAKE.sub("_", cls.__name__).lower()


_MODULE_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def environment_config_fields(
    config_file: Path, overrides: list[str] | None = None, *, resolve: bool = True
) -> dict[str, Any]:
    """The fields of the first resources-server instance in an environment's ``configs/<name>.yaml`` (empty
    when it has none), after dotted ``overrides`` of the YAML tree; ``entrypoint`` is left out (the
    environment's entry point names the class). ``resolve=False`` keeps ``${...}`` as written (for the domain)."""
    return server_fields(load_tree([config_file], overrides or []), resolve=resolve)


def server_fields(config: ConfigTree, *, resolve: bool = True) -> dict[str, Any]:
    """The fields of a loaded tree's first resources-server instance (empty when it has none), ``entrypoint``
    left out: ``environment_config_fields`` for a caller holding the tree already."""
    instances = [i for i in instances_in_tree(config, resolve=resolve) if i.server_type == "resources_servers"]
    return {k: v for k, v in instances[0].fields.items() if k != "entrypoint"} if instances else {}


def defines_resources_server(config_file: Path) -> bool:
    """True when the YAML file has a ``resources_servers`` instance (False when it is unreadable)."""
    try:
        instances = instances_from_files([config_file], [], resolve=False)
        return any(i.server_type == "resources_servers" for i in instances)
    except ConfigError:
        return False


def resolve_entrypoint(instance: InstanceConfig) -> str:
    """The entrypoint as ``file path`` or ``module:Class``, checked to exist."""
    entrypoint = instance.fields.get("entrypoint")
    if not entrypoint:
        raise ConfigError(f"{instance.source}: {instance.name}: 'entrypoint' is required (e.g. entrypoint: app.py)")
    entrypoint = str(entrypoint)
    if _MODULE_PATH.match(entrypoint) and not entrypoint.endswith(".py"):
        return entrypoint
    path = Path(entrypoint)
    if not path.is_absolute():
        base = instance.entrypoint_base()
        candidates = [base / path] if base else []
        if instance.config_dir is not None and instance.config_dir != base:
            candidates.append(instance.config_dir / path)
        candidates.append(Path.cwd() / path)
        path = next((c for c in candidates if c.is_file()), candidates[0])
    if not path.is_file():
        raise ConfigError(
            f"{instance.source}: {instance.name}: entrypoint {entrypoint!r} not found (looked for {path})"
        )
    return str(path.resolve())


def module_file(module: str) -> Path | None:
    """The source file of a dotted module, located without importing it (only the top package is *found*): an
    installed environment's ``configs/`` and ``data/`` sit beside it."""
    top, _, rest = module.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin not in ("built-in", "frozen") else None
    for location in spec.submodule_search_locations or []:
        base = Path(location, *rest.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None
