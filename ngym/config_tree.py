"""NeMo Gym's config tree: YAML files merged into one tree, as NeMo Gym 0.7.0's global config is built.

What NeMo Gym does, and ngym does alike (``nemo_gym/global_config.py``):

- **One tree.** Every config file is merged (OmegaConf deep merge, later files win) into one tree; a file's own
  ``config_paths`` includes merge *before* it, so the including file overrides them. ``key=value`` overrides
  (Hydra's dotted form) merge last.
- **Top-level keys** are either NeMo's reserved run settings (:data:`RESERVED_TOP_LEVEL_KEYS`), server
  instances (a mapping with one server-type key: ``resources_servers``, ...), or plain values any ``${...}`` in
  the tree may refer to (``judge_base_url: null``, ``responses_create_params: {...}``). A value is never an error
  for being a value.
- **Inheritance** before resolution: a mapping with ``_inherit_from: <dotted path>`` (the source is moved
  here) or ``_copy: <dotted path>`` (the source stays), or the string forms ``${inherit_from:path}`` /
  ``${copy:path}``, takes the source's content under its own keys; ``_delete_key: a,b`` drops keys.
- **Interpolation** is resolved when a server starts, per server, against the whole tree: ``${judge_base_url}``,
  ``${other.resources_servers.x.port}``, ``${oc.env:VAR,default}`` (the environment variable, else the default:
  a string, which the server's config class then parses), ``${oc.select:key,default}``. A broken reference in
  an instance nobody serves does not matter, as in NeMo Gym, where only the started servers resolve theirs.

Differences, because ``ngym run`` serves resources servers only: an include that is not found is skipped with a
warning (NeMo Gym's environments include agent configs by paths inside NeMo Gym's own repository), and an
inheritance whose source is absent (``simulator_model: {_copy: policy_model}`` without a policy model) is left
as it is rather than failing the run.

OmegaConf (~0.1 s) and PyYAML (~20 ms) are imported where a config is read, not at the top: commands that read
no config (a warm ``ngym list``) should not pay for them.
"""

from __future__ import annotations

import copy
import difflib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ngym.errors import ConfigError

log = logging.getLogger(__name__)

CONFIG_PATHS_KEY = "config_paths"
INHERIT_FROM_KEY = "_inherit_from"
COPY_KEY = "_copy"
DELETE_KEY_KEY = "_delete_key"
SERVER_TYPES = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")

#: NeMo Gym 0.7.0's reserved top-level keys (``NEMO_GYM_RESERVED_TOP_LEVEL_KEYS``): run-wide settings.
RESERVED_TOP_LEVEL_KEYS = frozenset(
    {
        "config_paths",
        "entrypoint",
        "default_host",
        "head_server",
        "disallowed_ports",
        "head_server_deps",
        "python_version",
        "pip_install_verbose",
        "use_absolute_ip",
        "uv_pip_set_python",
        "skip_venv_if_present",
        "hf_token",
        "ray_head_node_address",
        "port_range_low",
        "port_range_high",
        "dry_run",
        "server_spinup_timeout_seconds",
        "model_endpoint_readiness_timeout_seconds",
        "allow_openai_version_skew",
        "uv_cache_dir",
        "uv_lock_timeout_seconds",
        "uv_venv_dir",
        "results_dir",
        "cache_dir",
        "_inherit_from",
        "_copy",
        "nemo_gym_log_dir",
        "verbose",
        "json",
        "query",
        "observability_enabled",
        "model_call_capture_dir",
        "token_id_capture",
        "component_name",
        "skip_verification",
        "skip_verification_reward",
        "telemetry",
        "allow_unsupported_pairing",
        "environment_server_name",
        "environment_server_routes",
        "environment_routing_mode",
    }
)

#: Includes already reported missing (a command reads the same config several times: say it once).
_WARNED: set[tuple[Path, str]] = set()
_STRING_DIRECTIVE = re.compile(r"^\$\{(inherit_from|copy):([^}]*)\}$")


@dataclass
class ConfigTree:
    """The merged tree (an OmegaConf ``DictConfig``, interpolations unresolved) and where each top-level key
    was last set (for messages).

    A tree with nothing for OmegaConf to do (one file, no includes, overrides, inheritance, ``${...}`` or
    ``???``: every built-in environment's config) is kept as the YAML's plain dicts instead (``plain_data``),
    since importing OmegaConf costs ~0.1 s of every ``ngym run``'s start; the methods answer alike for both."""

    tree: Any
    origin: dict[str, Path] = field(default_factory=dict)
    plain_data: bool = False
    #: what it was loaded from: the files given (resolved) and the dotted overrides (``is_of`` compares them)
    loaded_from: tuple[tuple[Path, ...], tuple[str, ...]] = ((), ())

    def is_of(self, paths: list[Path], overrides: list[str] | None = None) -> bool:
        """True when this is the tree ``load_tree(paths, overrides)`` would load: a caller holding it passes it
        on instead of merging the same files again."""
        return self.loaded_from == _loaded_from(paths, overrides)

    def top_level(self) -> Iterator[tuple[str, Any]]:
        """``(key, node)`` for every top-level key but the reserved ones, nothing resolved."""
        for key, node in self.items(self.tree):
            if str(key) not in RESERVED_TOP_LEVEL_KEYS:
                yield str(key), node

    def is_mapping(self, node: Any) -> bool:
        """True when ``node`` (inside the tree) is a mapping."""
        if self.plain_data:
            return isinstance(node, dict)
        from omegaconf import DictConfig

        return isinstance(node, DictConfig)

    def child(self, node: Any, key: str) -> Any:
        """``node[key]`` without resolving it."""
        return node[key] if self.plain_data else node._get_node(key)

    def items(self, node: Any) -> Iterator[tuple[Any, Any]]:
        """A mapping's ``(key, value)`` pairs, nothing resolved."""
        return iter(node.items()) if self.plain_data else iter(node.items_ex(resolve=False))

    def plain(self) -> dict[str, Any]:
        """The tree as plain dicts and lists, ``${...}`` kept as written (what server processes receive)."""
        return self.plain_of(self.tree)

    def plain_of(self, node: Any) -> dict[str, Any]:
        """A mapping inside the tree as plain data, ``${...}`` kept as written."""
        if self.plain_data:
            return copy.deepcopy(node)
        from omegaconf import OmegaConf

        return OmegaConf.to_container(node, resolve=False)  # type: ignore[return-value]

    def resolved(self, node: Any, where: str) -> dict[str, Any]:
        """``node`` (a mapping inside the tree) as plain data with every ``${...}`` resolved against the tree;
        a reference that cannot be resolved is one ConfigError naming the key and how to set it."""
        if self.plain_data:
            return self.plain_of(node)  # nothing to resolve: load_tree checked
        from omegaconf import OmegaConf
        from omegaconf.errors import InterpolationKeyError, MissingMandatoryValue, OmegaConfBaseException

        try:
            return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)  # type: ignore[return-value]
        except InterpolationKeyError as exc:
            missing = re.search(r"Interpolation key '([^']+)' not found", str(exc))
            key = missing.group(1) if missing else "?"
            raise ConfigError(
                f"{where}: {exc.full_key} refers to '{key}', which no config sets: "
                f"give it as an override ({key}=VALUE) or in a config file"
            ) from None
        except MissingMandatoryValue as exc:
            raise ConfigError(
                f"{where}: {exc.full_key} is unset ('???'): give it as an override ({exc.full_key}=VALUE)"
            ) from None
        except OmegaConfBaseException as exc:
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"{where}: cannot resolve {getattr(exc, 'full_key', '')}: {message}") from None


def load_tree(paths: list[Path], overrides: list[str] | None = None) -> ConfigTree:
    """The merged tree of ``paths`` (each with its ``config_paths`` includes first), ``overrides`` on top, with
    inheritance applied (module docstring). ``ConfigError`` for a missing file, bad YAML or a bad override."""
    files = _files_in_merge_order(paths)
    loaded_from = _loaded_from(paths, overrides)
    if not overrides and len(files) == 1 and not _needs_omegaconf(files[0][1]):
        path, data = files[0]  # its config_paths already consumed by _files_in_merge_order
        return ConfigTree(data, {str(key): path for key in data}, plain_data=True, loaded_from=loaded_from)

    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    origin: dict[str, Path] = {}
    layers = []
    for path, data in files:
        for key in data:
            origin[str(key)] = path
        try:
            layers.append(OmegaConf.create(data))
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{path}: {str(exc).splitlines()[0]}") from None
    try:
        tree = OmegaConf.merge(*layers) if layers else OmegaConf.create({})
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot merge {', '.join(map(str, paths))}: {str(exc).splitlines()[0]}") from None
    if overrides:
        check_override_paths(OmegaConf.to_container(tree, resolve=False), overrides)
        try:
            tree = OmegaConf.merge(tree, OmegaConf.from_dotlist(overrides))
        except OmegaConfBaseException as exc:
            raise ConfigError(f"bad override {overrides}: {str(exc).splitlines()[0]}") from None
    assert isinstance(tree, DictConfig)  # merged mappings: a mapping
    tree.pop(CONFIG_PATHS_KEY, None)  # consumed: includes are merged already
    _apply_inheritance(tree)
    return ConfigTree(tree, origin, loaded_from=loaded_from)


def _loaded_from(paths: list[Path], overrides: list[str] | None) -> tuple[tuple[Path, ...], tuple[str, ...]]:
    return tuple(p.resolve() for p in paths), tuple(overrides or ())


def check_override_paths(tree: Any, overrides: list[str]) -> None:
    """A dotted override (``a.b.c=value``) must address the tree: everything before its last key must be a
    mapping the files have (the last key may be new: a config field the YAML leaves to its default). Else
    ``ConfigError`` naming the full paths it could have meant: merged as given, it would add a branch nothing
    reads and change nothing (``judge_model_server.name=judge`` left the judge on the policy model)."""
    for override in overrides:
        key = override.partition("=")[0]
        *parents, _leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if parents and not isinstance(node, dict):
            raise ConfigError(f"override {key!r} addresses nothing in the config{_paths_meant(tree, key)}")


def _paths_meant(tree: Any, key: str) -> str:
    """``"; did you mean …"`` with the tree's full paths that end in ``key`` (it was given without its
    prefix), else the closest path or two."""
    paths = list(_dotted_paths(tree))
    ending = [path for path in paths if path.endswith("." + key)]
    if not ending:
        parent = key.rpartition(".")[0]
        ending = [p + "." + key.rpartition(".")[2] for p in paths if p.endswith("." + parent) or p == parent]
    close = ending[:3] or difflib.get_close_matches(key, paths, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(path) for path in close)}?" if close else ""


def _dotted_paths(node: Any, prefix: str = "") -> Iterator[str]:
    """Every dotted path of a nested mapping, mappings included."""
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}{key}"
            yield path
            yield from _dotted_paths(value, path + ".")


def _needs_omegaconf(data: Any) -> bool:
    """True when YAML data holds anything OmegaConf would change or check: an interpolation (``${...}``, also
    the string forms of inheritance), a mandatory value (``???``), an inheritance key, a key or value that is not
    a plain YAML scalar (OmegaConf refuses some: a date, say, which it would report)."""
    if isinstance(data, dict):
        return any(
            not isinstance(key, str) or key in (INHERIT_FROM_KEY, COPY_KEY, DELETE_KEY_KEY) or _needs_omegaconf(value)
            for key, value in data.items()
        )
    if isinstance(data, list):
        return any(_needs_omegaconf(item) for item in data)
    if isinstance(data, str):
        return "${" in data or data == "???"
    return not (data is None or isinstance(data, (bool, int, float)))


def load_yaml_files(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Each file's YAML as a mapping (resolved path, data); ``ConfigError`` naming the file and line."""
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


def _files_in_merge_order(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Each file after its own includes (depth first), each file once."""
    ordered: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()

    def visit(path: Path) -> None:
        ((resolved, data),) = load_yaml_files([path])
        if resolved in seen:
            return
        seen.add(resolved)
        includes = data.get(CONFIG_PATHS_KEY) or []
        if isinstance(includes, str):
            includes = [includes]
        if not isinstance(includes, list):
            raise ConfigError(f"{resolved}: {CONFIG_PATHS_KEY} must be a list of config file paths")
        for include in includes:
            found = _find_include(str(include), resolved)
            if found is None:
                if (resolved, str(include)) in _WARNED:
                    continue
                _WARNED.add((resolved, str(include)))
                log.warning(
                    "%s: config_paths entry %s not found (a path inside NeMo Gym's repository?): skipped",
                    resolved,
                    include,
                )
                continue
            visit(found)
        ordered.append((resolved, {k: v for k, v in data.items() if k != CONFIG_PATHS_KEY}))

    for path in paths:
        visit(path)
    return ordered


def _find_include(entry: str, including: Path) -> Path | None:
    """An include path as NeMo Gym resolves it: absolute, else under the working directory, else under the
    root the including config belongs to (the folder holding ``resources_servers/``)."""
    path = Path(os.path.expanduser(entry))
    if path.is_absolute():
        return path if path.is_file() else None
    roots = [Path.cwd(), *(p for p in including.parents if p.name == "resources_servers")]
    candidates = [Path.cwd() / path] + [root.parent / path for root in roots[1:]]
    return next((c for c in candidates if c.is_file()), None)


def _apply_inheritance(tree: Any) -> None:
    """``_inherit_from`` / ``_copy`` / ``${inherit_from:..}`` / ``${copy:..}`` / ``_delete_key``, in place."""
    from omegaconf import OmegaConf, open_dict

    frozen = tree.copy()
    with open_dict(tree):
        _inherit_in(tree, tree, frozen, OmegaConf)


def _inherit_in(node: Any, root: Any, frozen: Any, omegaconf: Any) -> None:
    from omegaconf import DictConfig, ListConfig

    for key, value in list(node.items_ex(resolve=False)):
        deleted: list[str] = []
        if isinstance(value, DictConfig) and DELETE_KEY_KEY in value:
            deleted = [k.strip() for k in str(value.pop(DELETE_KEY_KEY)).split(",") if k.strip()]
            for name in [k for k in deleted if k in value]:
                value.pop(name)
        if isinstance(value, DictConfig):
            _inherit_in(value, root, frozen, omegaconf)
        elif isinstance(value, ListConfig):
            for item in value:
                if isinstance(item, DictConfig):
                    _inherit_in(item, root, frozen, omegaconf)
        source_path, move = _directive(value)
        if source_path is None:
            continue
        source = omegaconf.select(frozen, source_path, throw_on_missing=False)
        if source is None:  # nothing to inherit from here (ngym serves no model): left as written
            log.debug("%s: inherits from %s, which no config defines: left as it is", key, source_path)
            continue
        if move:
            parent_path, _, last = source_path.rpartition(".")
            parent = omegaconf.select(root, parent_path) if parent_path else root
            if isinstance(parent, DictConfig) and last in parent and last != key:
                parent.pop(last)
        merged = omegaconf.merge(source, value) if isinstance(value, DictConfig) else source
        for name in deleted:
            if isinstance(merged, DictConfig):
                merged.pop(name, None)
        node[key] = merged


def _directive(value: Any) -> tuple[str | None, bool]:
    """(source path, whether the source moves) of an inheritance directive on ``value``; (None, False) else."""
    from omegaconf import DictConfig

    if isinstance(value, str):
        match = _STRING_DIRECTIVE.match(value)
        return (match.group(2).strip(), match.group(1) == "inherit_from") if match else (None, False)
    if isinstance(value, DictConfig):
        for key, move in ((INHERIT_FROM_KEY, True), (COPY_KEY, False)):
            if key in value:
                return str(value.pop(key)), move
    return None, False
