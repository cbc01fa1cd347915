"""``ngym run``: serve environments from config files or by installed name."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ngym.errors import ConfigError

if TYPE_CHECKING:
    from ngym.server.app import ServeSpec


def build_specs(
    targets: tuple[str, ...], host: str | None, port: int | None, *, refresh: bool = False
) -> list[ServeSpec]:
    """Serve specs for config files and/or environment names, with ``key=value`` overrides applied.

    A dotted override (``inst.resources_servers.impl.port=9000``) addresses the YAML tree; a plain one
    (``port=9000``, ``data_dir=/data``) sets that field on every instance.
    """
    from ngym.config import apply_overrides, instances_from_files, resolve_entrypoint, split_overrides
    from ngym.server.app import ServeSpec

    words = [t for t in targets if "=" not in t or t.lstrip("+").startswith("config_paths=")]
    overrides = [t for t in targets if t not in words]
    paths, dotted = split_overrides([*words, *overrides])
    field_overrides = apply_overrides({}, [o for o in dotted if "." not in o.partition("=")[0]])
    tree_overrides = [o for o in dotted if "." in o.partition("=")[0]]

    specs: list[ServeSpec] = []
    config_paths = [p for p in paths if p.suffix in (".yaml", ".yml") or p.is_file()]
    names = [str(p) for p in paths if p not in config_paths]
    if config_paths:
        for instance in instances_from_files(config_paths, tree_overrides):
            if instance.server_type != "resources_servers":
                click.echo(f"ngym: skipping {instance.name} ({instance.server_type}: ngym serves resources servers)")
                continue
            target = resolve_entrypoint(instance)
            check_override_keys(instance.name, target, instance.fields, field_overrides)
            specs.append(ServeSpec(target=target, name=instance.name, fields={**instance.fields, **field_overrides}))
    for name in names:
        spec = spec_for_environment(name, tree_overrides, refresh=refresh)
        check_override_keys(name, spec.target, spec.fields, field_overrides)
        spec.fields.update(field_overrides)
        specs.append(spec)
    if not specs:
        raise ConfigError("nothing to serve: give a config file (configs/x.yaml) or an installed environment name")
    if len(specs) > 1 and port is not None:
        raise ConfigError("--port applies to one server; set each instance's port in its config instead")
    for spec in specs:
        if host is not None:
            spec.fields["host"] = host
        if port is not None:
            spec.fields["port"] = port
    if len(specs) > 1:
        _spread_default_ports(specs)
    return specs


def check_override_keys(name: str, target: str, config_keys: Iterable[str], overrides: dict[str, Any]) -> None:
    """A plain ``key=value`` override must name a field of the server's config class or a key its YAML has:
    a typo would otherwise be kept as an unused extra field (the config allows extras) and change nothing."""
    if not overrides:
        return
    from ngym.server.app import load_server_class
    from ngym.suggest import did_you_mean

    config_class = load_server_class(target).config_class()
    valid = set(config_class.model_fields) | {f.alias for f in config_class.model_fields.values() if f.alias}
    valid |= set(config_keys)
    unknown = sorted(set(overrides) - valid)
    if unknown:
        key = unknown[0]
        raise ConfigError(
            f"{name}: unknown config key {key!r}{did_you_mean(key, valid)} "
            f"(valid keys for {config_class.__name__}: {', '.join(sorted(valid))})"
        )


def spec_for_environment(name: str, tree_overrides: list[str], *, refresh: bool = False) -> ServeSpec:
    """How to serve the installed environment ``name``: from the serve snapshot when nothing it depends on
    changed (no plugin system loaded, no YAML parsed), else (or with ``refresh``) resolved through the
    registry and remembered."""
    from ngym.plugins import snapshot
    from ngym.server.app import ServeSpec

    known = None if refresh else snapshot.lookup(name)
    if known is not None:
        fields = known.fields if not tree_overrides else None
        if fields is None:
            from ngym.config import environment_config_fields

            fields = environment_config_fields(known.config, tree_overrides) if known.config is not None else {}
            if not tree_overrides:
                snapshot.remember_fields(name, fields)
        return ServeSpec(target=known.target, name=name, fields=dict(fields), app_plugins=known.app_plugins)

    from ngym.plugins.discovery import find_environment
    from ngym.plugins.manager import get_plugin_manager
    from ngym.plugins.registry import get_registry

    pm = get_plugin_manager()  # every hook plugin: serving applies their ngym_extend_app anyway
    entry = find_environment(name)
    fields = entry.config_fields(tree_overrides)
    if not tree_overrides:
        snapshot.remember(get_registry(), pm, name, fields)
    return ServeSpec(target=entry.target, name=name, fields=dict(fields))


def _spread_default_ports(specs: list) -> None:
    """Several servers without explicit ports get consecutive ones from 8000."""
    used = {int(s.fields["port"]) for s in specs if s.fields.get("port")}
    next_port = 8000
    for spec in specs:
        if not spec.fields.get("port"):
            while next_port in used:
                next_port += 1
            spec.fields["port"] = next_port
            used.add(next_port)


@click.command(
    short_help="Serve environments (names or config files).", context_settings={"ignore_unknown_options": True}
)
@click.argument("targets", nargs=-1, required=True)
@click.option("--host", default=None, help="Interface to listen on (default from config, else 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port (default from config, else 8000; 0 picks a free one).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="uvicorn worker processes.")
@click.option("--access-log/--no-access-log", default=False, help="Log every request.")
@click.option(
    "--refresh", is_flag=True, help="Resolve environment names through the plugin registry, not the serve snapshot."
)
def run(
    targets: tuple[str, ...], host: str | None, port: int | None, workers: int, access_log: bool, refresh: bool
) -> None:
    """Serve environments: config files (NeMo Gym YAML) and/or installed environment names.

    \b
    Examples:
      ngym run example_single_tool_call
      ngym run resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml port=9000
      ngym run "+config_paths=[a.yaml,b.yaml]"
    """
    import logging

    from ngym.server.host import serve_many, serve_one

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    specs = build_specs(targets, host, port, refresh=refresh)
    if len(specs) == 1:
        serve_one(specs[0], workers=workers, access_log=access_log)
    else:
        raise SystemExit(serve_many(specs, workers=workers, access_log=access_log))


__all__ = ["run", "build_specs", "Path"]
