"""``--model-url NAME=URL``: where the model servers an environment calls by name live.

NeMo Gym environments call judge, user-simulator and retrieval models by the instance name in their config
(``judge_model_server: {type: responses_api_models, name: policy_model}``). ``ngym run`` carries the
mapping to the server processes in one environment variable, ``NGYM_SERVER_URLS``: a JSON object
``{"<name>": "<base URL>"}`` (the compat ``ServerClient`` of ``ngym-nemo-gym`` reads it; a URL may end in
``/v1``). A name given on the command line wins over the same name already in the variable. The YAML configs
``ngym run`` was given travel the same way in ``NGYM_NEMO_GLOBAL_CONFIG`` (the merged tree as JSON), so a
name can also resolve to an instance defined there (NeMo Gym's ``ModelServerRef`` shape).
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ngym.config_tree import ConfigTree, load_tree
from ngym.errors import ConfigError
from ngym.run_carriers import SERVER_URLS_ENV as MODEL_URLS_ENV
from ngym.run_carriers import read_global_config, read_server_urls, write_global_config, write_server_urls

__all__ = [
    "MODEL_URLS_ENV",
    "current_model_urls",
    "export_global_config",
    "export_model_instances",
    "export_model_urls",
    "parse_model_urls",
]


def parse_model_urls(values: Iterable[str]) -> dict[str, str]:
    """``["judge=http://127.0.0.1:9000/v1", ...]`` → ``{"judge": "http://127.0.0.1:9000/v1"}``."""
    mapping: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        name, url = name.strip(), url.strip()
        if not sep or not name or not url:
            raise ConfigError(f"--model-url {value!r}: expected NAME=URL (e.g. judge=http://127.0.0.1:9000)")
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"--model-url {name}: {url!r} is not an http(s) URL")
        mapping[name] = url.rstrip("/")
    return mapping


def current_model_urls(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The mapping already in ``NGYM_SERVER_URLS`` (empty when unset); a malformed value is a ConfigError."""
    try:
        return read_server_urls(environ)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def export_model_urls(values: Iterable[str], environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Merge ``NAME=URL`` values into ``NGYM_SERVER_URLS`` (of ``environ``, default this process's); the result."""
    current_model_urls(environ)  # a malformed value already there: the ConfigError, before anything is written
    try:
        return write_server_urls(parse_model_urls(values), environ)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def export_model_instances(mapping: dict[str, str], environ: MutableMapping[str, str] | None = None) -> None:
    """Place each ``--model-url`` server in ``NGYM_NEMO_GLOBAL_CONFIG`` too: environments look their judge up
    there (``get_first_server_config_dict``, then ``host``/``port``) before calling. A name the configs define
    keeps its fields with ``host``, ``port`` and any base-URL field pointed at the URL (NeMo Gym fills in the
    host and port of every instance it starts; here the user said where it listens); an undefined name becomes
    ``NAME: {responses_api_models: {openai_model: {host, port, openai_base_url}}}``."""
    tree = read_global_config(environ)
    for name, url in mapping.items():
        parsed = urlparse(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        fields = _instance_fields(tree.get(name))
        if fields is None:
            tree[name] = {
                "responses_api_models": {
                    "openai_model": {"host": parsed.hostname, "port": port, "openai_base_url": url}
                }
            }
            continue
        fields.update(host=parsed.hostname, port=port)
        fields.update({key: url for key in _BASE_URL_FIELDS if key in fields})
    if tree:
        write_global_config(tree, environ)


_BASE_URL_FIELDS = ("openai_base_url", "base_url", "url")


def _instance_fields(node: Any) -> dict[str, Any] | None:
    """The (mutable) fields mapping of an instance ``{type: {implementation: fields}}``, None when not one."""
    for _ in range(2):
        if not isinstance(node, dict) or len(node) != 1:
            return None
        node = next(iter(node.values()))
    return node if isinstance(node, dict) else None


def export_global_config(
    config_files: Iterable[Path],
    environ: MutableMapping[str, str] | None = None,
    *,
    overrides: list[str] | None = None,
    tree: ConfigTree | None = None,
) -> None:
    """Put the merged tree of ``config_files`` (NeMo Gym's: includes, ``overrides``, inheritance; ``${...}`` kept
    as written, each server resolves what it reads, as NeMo Gym's do) in ``NGYM_NEMO_GLOBAL_CONFIG``; nothing
    when no file is given. ``tree``: those files already loaded with ``overrides`` (not merged again)."""
    files = list(dict.fromkeys(config_files))
    if not files:
        return
    if tree is None or not tree.is_of(files, overrides):
        tree = load_tree(files, overrides)
    plain = tree.plain()
    if plain:
        write_global_config(plain, environ)
