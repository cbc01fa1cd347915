"""Where the other servers an environment calls by name are: judge, user-simulator and retrieval models.

A NeMo Gym environment names the servers it calls (``ModelServerRef(type="responses_api_models",
name="judge_model")``) and posts to them through ``ServerClient``. Under ngym a name resolves, first match wins:

1. an explicit URL: :func:`set_server_urls` (``ngym run --model-url NAME=URL``) or the ``NGYM_SERVER_URLS``
   environment variable (a JSON object ``{"NAME": "URL"}``, inherited by worker processes);
2. the instance of that name in the YAML configs ``ngym run`` was given (:func:`set_global_config`, or the
   ``NGYM_NEMO_GLOBAL_CONFIG`` environment variable holding them as JSON), in NeMo Gym's shape
   ``NAME: {<server type>: {<implementation>: {fields}}}``: an ``openai_base_url`` / ``base_url`` field makes it
   an OpenAI-compatible endpoint (``openai_api_key`` / ``api_key`` is sent as a bearer token); else its
   ``host`` and ``port``.

A URL may end in ``/v1`` (as OpenAI-compatible base URLs do): ``/v1/chat/completions`` then goes to
``<base>/chat/completions``, so any OpenAI-compatible endpoint (vLLM, the OpenAI API, ngym's replay model) can
stand in for a NeMo Gym model server.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The two variables ngym run carries are defined, read and written by ngym alone (ngym.run_carriers).
from ngym.plugin_api import (
    GLOBAL_CONFIG_ENV,
    SERVER_URLS_ENV,
    read_global_config,
    read_server_urls,
    write_global_config,
    write_server_urls,
)

__all__ = [
    "GLOBAL_CONFIG_ENV",
    "SERVER_URLS_ENV",
    "ServerNotConfigured",
    "ServerTarget",
    "global_config",
    "instance_fields",
    "resolve_server",
    "set_global_config",
    "set_server_urls",
]

_BASE_URL_FIELDS = ("openai_base_url", "base_url", "url")
_API_KEY_FIELDS = ("openai_api_key", "api_key")


class ServerNotConfigured(LookupError):
    """A server name the environment calls has no URL: the message says how to give one."""


@dataclass(frozen=True)
class ServerTarget:
    """Where requests for one server name go."""

    name: str
    base_url: str
    api_key: str | None = None

    def url_for(self, url_path: str) -> str:
        """``base_url`` joined with ``url_path``; a ``/v1`` both end and start with is written once."""
        path = url_path if url_path.startswith("/") else "/" + url_path
        if self.base_url.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
            path = path[len("/v1") :]
        return self.base_url + path

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def set_server_urls(urls: Mapping[str, str]) -> None:
    """Point server names at URLs (``{"judge_model": "http://127.0.0.1:8001/v1"}``); later calls add to earlier.

    The mapping is also exported in ``NGYM_SERVER_URLS`` so server worker processes started afterwards see it.
    """
    write_server_urls(urls)


def set_global_config(config: Mapping[str, Any]) -> None:
    """Record the merged YAML configs ``ngym run`` was given (instance name → type → implementation → fields).

    Exported in ``NGYM_NEMO_GLOBAL_CONFIG`` (JSON) for worker processes; values that are not JSON become strings.
    """
    write_global_config(_plain(config))


def global_config() -> dict[str, Any]:
    """The recorded configs (``{}`` when none were given)."""
    return read_global_config()


#: Names resolved so far, by (name, the two carried variables' raw values): an environment resolves its judge on
#: every call (two per verify for an equivalence judge), and resolving parses the carried JSON, and the whole
#: global config (an OmegaConf tree when a field holds ``${...}``), each time. Keyed by the raw values, a cached
#: answer is exactly what resolving again would give; a name that resolves nowhere is never cached.
_resolved: dict[tuple[str, str | None, str | None], ServerTarget] = {}
_RESOLVED_MAX = 256


def resolve_server(name: str) -> ServerTarget:
    """Where requests for server ``name`` go; :class:`ServerNotConfigured` when nowhere says."""
    key = (name, os.environ.get(SERVER_URLS_ENV), os.environ.get(GLOBAL_CONFIG_ENV))
    target = _resolved.get(key)
    if target is None:
        target = _resolve_server(name)
        if len(_resolved) >= _RESOLVED_MAX:  # the variables changed many times (tests): start again
            _resolved.clear()
        _resolved[key] = target
    return target


def _resolve_server(name: str) -> ServerTarget:
    url = read_server_urls().get(name)
    if url:
        return ServerTarget(name, str(url).rstrip("/"))
    fields = instance_fields(global_config(), name)
    if fields is not None:
        base = next((fields[k] for k in _BASE_URL_FIELDS if fields.get(k)), None)
        if base:
            key = next((fields[k] for k in _API_KEY_FIELDS if fields.get(k)), None)
            return ServerTarget(name, str(base).rstrip("/"), str(key) if key else None)
        if fields.get("host") and fields.get("port"):
            return ServerTarget(name, f"http://{fields['host']}:{fields['port']}")
    raise ServerNotConfigured(
        f"no URL for server {name!r}: give one with `ngym run --model-url {name}=URL` (any OpenAI-compatible "
        f'endpoint for a model), with {SERVER_URLS_ENV}=\'{{"{name}": "URL"}}\', or define instance {name!r} '
        "with a base_url (or host and port) in a config passed to ngym run"
    )


def instance_fields(config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The fields of instance ``name`` in a NeMo Gym-shaped config (a mapping or an OmegaConf ``DictConfig``):
    ``name → type → implementation → fields``, each ``${...}`` resolved against the whole config as NeMo Gym
    resolves a server's (``${judge_base_url}``, ``${oc.env:VAR,default}``); a field whose reference cannot be
    resolved is left out."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(config, DictConfig):
        raw = _raw_fields(config, name)
        if raw is None or "${" not in json.dumps(raw, default=str):
            return raw  # nothing to resolve (the usual case): no OmegaConf tree built per call
        config = OmegaConf.create(dict(config))
    node: Any = config
    for depth in range(3):
        key = name if depth == 0 else next(iter(node.keys()), None)
        node = node._get_node(key) if key is not None and key in node else None
        if not isinstance(node, DictConfig):
            return None
    resolved: dict[str, Any] = {}
    for key in node:
        try:
            value = node[key]
            is_container = isinstance(value, DictConfig | ListConfig)
            resolved[str(key)] = OmegaConf.to_container(value, resolve=True) if is_container else value
        except OmegaConfBaseException:
            continue
    return resolved


def _raw_fields(config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    node: Any = config.get(name)
    for _ in range(2):
        if not isinstance(node, Mapping) or len(node) == 0:
            return None
        node = next(iter(node.values()))
    return dict(node) if isinstance(node, Mapping) else None


def _plain(value: Any) -> Any:
    """OmegaConf containers and other mappings → plain dicts and lists."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, DictConfig | ListConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # omegaconf is a dependency; tolerate its absence in a stripped install
        pass
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
