"""``ngym run``: serve environments from config files or by installed name."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import click

from ngym.config import InstanceConfig, apply_overrides, split_overrides
from ngym.config_tree import ConfigTree, load_tree
from ngym.errors import ConfigError
from ngym.model_urls import export_global_config, export_model_instances, export_model_urls
from ngym.readiness import needs
from ngym.redact import take_secret_overrides
from ngym.required_env import check_env
from ngym.server.hosting.host import serve_many, serve_one
from ngym.server.pipeline.app import ServeSpec
from ngym.suggest import did_you_mean
from ngym.targets import Environment, environments_in_configs, resolve


def build_specs(targets: tuple[str, ...], host: str | None, port: int | None) -> list[ServeSpec]:
    """Serve specs for config files and/or environments (names, folders, app.py), ``key=value`` overrides applied.

    A dotted override (``inst.resources_servers.impl.port=9000``) addresses the YAML tree; a plain one
    (``port=9000``, ``data_dir=/data``) sets that field on every instance, and a plain one naming a top-level
    value of the configs, or one their ``${...}`` refer to (NeMo Gym's ``++judge_base_url=...``), sets that
    value, which their ``${...}`` read.
    """
    words = [t for t in targets if "=" not in t or t.lstrip("+").startswith("config_paths=")]
    overrides = [t for t in targets if t not in words]
    paths, dotted = split_overrides([*words, *overrides])
    plain = [o for o in dotted if "." not in o.partition("=")[0]]
    field_overrides = apply_overrides({}, plain)
    tree_overrides = [o for o in dotted if "." in o.partition("=")[0]]

    config_paths = [p for p in paths if p.suffix in (".yaml", ".yml") or p.is_file() and p.suffix != ".py"]
    try:
        from_files, others = _environments(paths, config_paths, tree_overrides, words)
        environments, unresolved = [*from_files, *others], None
    except ConfigError as exc:  # perhaps a ${value} a plain override below gives
        environments, others, unresolved = [], [], exc
    # servers' calls by name resolve against the configs served (NeMo Gym's global config): the files given,
    # and an installed environment's own configs/<name>.yaml (the config of an instance of the files given is
    # one of them or one they include: in their tree already)
    served = [*config_paths, *(e.config for e in others if e.config is not None)]
    # the plan's tree: loaded once (by resolving the environments) and passed on, not merged again
    tree = _served_tree(served, environments, tree_overrides)
    top_level = tree_values(tree.plain(), [o.partition("=")[0] for o in plain]) if tree is not None else set()
    values = [o for o in plain if o.partition("=")[0] in top_level]
    if values:
        tree_overrides += values
        environments = [e for group in _environments(paths, config_paths, tree_overrides, words) for e in group]
        tree = _served_tree(served, environments, tree_overrides)
    elif unresolved is not None:
        raise unresolved
    export_global_config(served, overrides=tree_overrides, tree=tree)
    for environment in environments:
        environment.check_config_domain()
        check_env(environment)  # a declared variable unset: one line now, not a server failing minutes later
        check_override_keys(environment, {k: v for k, v in field_overrides.items() if k not in top_level})
    specs = [
        environment.serve_spec(
            **{k: v for k, v in field_overrides.items() if k not in top_level or k in override_keys(environment)}
        )
        for environment in environments
    ]
    for environment in environments:  # said before serving: an /reset that fails later reads as a bug
        for need in needs(environment.name, environment.folder, {**environment.fields, **field_overrides}):
            click.echo(f"ngym: warning: {need.sentence(environment.name)}", err=True)
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


def tree_values(tree: dict[str, Any], keys: list[str]) -> set[str]:
    """The top-level values of a config tree, with those of ``keys`` its ``${...}`` refer to though no file sets
    them (``${policy_base_url}``: NeMo Gym users give it with ``++policy_base_url=...`` or in env.yaml)."""
    text = json.dumps(tree, default=str)
    referenced = {k for k in keys if re.search(r"\$\{(oc\.select:)?" + re.escape(k) + r"[},.]", text)}
    return set(tree) | referenced


def _environments(
    paths: list[Path], config_paths: list[Path], tree_overrides: list[str], words: list[str]
) -> tuple[list[Environment], list[Environment]]:
    """The instances of the config files given, and the environments the other targets name."""
    from_files = environments_in_configs(config_paths, tree_overrides, on_skip=_say_skipped) if config_paths else []
    return from_files, [resolve(_as_typed(p, words), tree_overrides) for p in paths if p not in config_paths]


def _as_typed(path: Path, words: list[str]) -> str:
    """The target as the user typed it (``Path("./x")`` is ``x``, which would name an installed environment)."""
    return next((word for word in words if Path(word) == path and word != str(path)), str(path))


def _served_tree(served: list[Path], environments: list[Environment], overrides: list[str]) -> ConfigTree | None:
    """The merged tree of the configs served: the one resolving an environment loaded when it is of the same
    files (``ngym run NAME``, ``ngym run a.yaml``: the usual starts merge their YAML once), else loaded here."""
    if not served:
        return None
    loaded = [e.tree for e in environments if e.tree is not None and e.tree.is_of(served, overrides)]
    return loaded[0] if loaded else load_tree(served, overrides)


def override_keys(environment: Environment) -> set[str]:
    """The keys a plain ``key=value`` override may set on the environment: its config class's fields (and
    aliases) and the keys its YAML has."""
    config_class = environment.server_class.config_class()
    valid = set(config_class.model_fields) | {f.alias for f in config_class.model_fields.values() if f.alias}
    return valid | set(environment.fields)


def check_override_keys(environment: Environment, overrides: dict[str, Any]) -> None:
    """A plain ``key=value`` override must name a field of the server's config class or a key its YAML has:
    a typo would otherwise be kept as an unused extra field (the config allows extras) and change nothing."""
    if not overrides:
        return
    valid = override_keys(environment)
    unknown = sorted(set(overrides) - valid)
    if unknown:
        key = unknown[0]
        config_class = environment.server_class.config_class()
        raise ConfigError(
            f"{environment.name}: unknown config key {key!r}{did_you_mean(key, valid)} "
            f"(valid keys for {config_class.__name__}: {', '.join(sorted(valid))})"
        )


def put_tools_on_path(environ: MutableMapping[str, str] | None = None) -> None:
    """Put this interpreter's ``bin`` folder (and uv's, when the ``uv`` package is installed) first on ``PATH``,
    as an activated virtualenv has it: NeMo Gym starts every server inside its activated venv, with uv at hand
    (it builds the venvs with uv), and environments call ``python``, ``pip`` and ``uv`` by name (bigcodebench
    builds its evaluation venv with ``uv``)."""
    environ = os.environ if environ is None else environ
    folders = [str(Path(sys.executable).parent)]
    try:
        from uv import find_uv_bin  # ngym-nemo-gym depends on uv

        folders.append(str(Path(find_uv_bin()).parent))
    except (ImportError, FileNotFoundError):
        pass
    current = [p for p in environ.get("PATH", "").split(os.pathsep) if p]
    environ["PATH"] = os.pathsep.join([*dict.fromkeys(folders), *(p for p in current if p not in folders)])


def _say_skipped(instance: InstanceConfig) -> None:
    click.echo(f"ngym: skipping {instance.name} ({instance.server_type}: ngym serves resources servers)")


def _spread_default_ports(specs: list[ServeSpec]) -> None:
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
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Processes serving one port: with sessions in Redis, uvicorn workers; else one process per worker behind "
    "HAProxy, which keeps each rollout on the worker that seeded it.",
)
@click.option("--access-log/--no-access-log", default=False, help="Log every request.")
@click.option(
    "--model-url",
    "model_urls",
    multiple=True,
    metavar="NAME=URL",
    help="Where the model server NAME (a judge, a user simulator) listens; repeatable. Sets NGYM_SERVER_URLS.",
)
def run(
    targets: tuple[str, ...],
    host: str | None,
    port: int | None,
    workers: int,
    access_log: bool,
    model_urls: tuple[str, ...],
) -> None:
    """Serve environments: config files (NeMo Gym YAML), installed environment names, folders or app.py.

    \b
    Examples:
      ngym run example_single_tool_call
      ngym run resources_servers/example_single_tool_call/configs/example_single_tool_call.yaml port=9000
      ngym run "+config_paths=[a.yaml,b.yaml]"
      ngym run math_with_judge --model-url policy_model=http://127.0.0.1:9000/v1

    \b
    HTTP limits are config fields too (defaults in docs/protocol.md, "Limits"):
      max_request_body_bytes=33554432 request_body_timeout_seconds=60 request_header_timeout_seconds=30
      max_request_header_bytes=65536 keep_alive_timeout_seconds=5 session_id_max_length=256
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    put_tools_on_path()
    targets = (*targets, *take_secret_overrides())  # a parent's secret key=value: never on a command line
    urls = export_model_urls(model_urls)  # before any server starts: worker processes inherit it
    specs = build_specs(targets, host, port)  # exports the YAML configs it was given
    export_model_instances(urls)
    if len(specs) == 1:
        serve_one(specs[0], workers=workers, access_log=access_log)
    else:
        raise SystemExit(serve_many(specs, workers=workers, access_log=access_log))


__all__ = ["run", "build_specs", "check_override_keys"]
