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

from ngym.errors import ConfigError

SERVER_TYPES = ("resources_servers", "responses_api_agents", "responses_api_models")
_CONFIG_PATHS_KEY = "config_paths"


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


def load_yaml_files(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    import yaml  # here, not at the top: a warm `ngym list` reads no YAML and should not pay ~20 ms for PyYAML

    loaded = []
    for path in paths:
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of instance names")
        loaded.append((path.resolve(), data))
    return loaded


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


def instances_from_files(paths: list[Path], overrides: list[str]) -> list[InstanceConfig]:
    """Every resources-server instance of the merged config files, overrides applied."""
    files = load_yaml_files(paths)
    merged: dict[str, Any] = {}
    origin: dict[str, Path] = {}
    for path, data in files:
        for instance, body in data.items():
            merged[instance] = body
            origin[instance] = path
    merged = apply_overrides(merged, overrides)
    instances = []
    for name, body in merged.items():
        if not isinstance(body, dict):
            raise ConfigError(f"{origin.get(name, '?')}: {name}: expected a mapping with a server type")
        server_types = [key for key in body if key in SERVER_TYPES]
        if len(server_types) != 1:
            raise ConfigError(
                f"{origin.get(name, '?')}: instance {name!r} must have exactly one of {', '.join(SERVER_TYPES)}"
            )
        server_type = server_types[0]
        implementations = body[server_type]
        if not isinstance(implementations, dict) or len(implementations) != 1:
            raise ConfigError(
                f"{origin.get(name, '?')}: {name}.{server_type} must map one implementation to its fields"
            )
        implementation, fields = next(iter(implementations.items()))
        fields = dict(fields or {})
        source = origin.get(name)
        instances.append(
            InstanceConfig(
                name=name,
                implementation=implementation,
                fields=fields,
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
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ngym"


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def default_instance_name(cls: type) -> str:
    """The instance name of a class run without a config: ``WeatherResourcesServer`` → ``weather_resources_server``."""
    return _SNAKE.sub("_", cls.__name__).lower()


_MODULE_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def environment_config_fields(config_file: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The fields of the first resources-server instance in an environment's ``configs/<name>.yaml`` (empty
    when it has none), after dotted ``overrides`` of the YAML tree; ``entrypoint`` is left out (the
    environment's entry point names the class)."""
    instances = instances_from_files([config_file], overrides or [])
    instances = [i for i in instances if i.server_type == "resources_servers"]
    return {k: v for k, v in instances[0].fields.items() if k != "entrypoint"} if instances else {}


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
