"""The two environment variables a run carries to its server processes, defined and read/written here only.

``ngym run`` (``ngym.model_urls``) writes them before any server starts, so worker processes inherit them;
the compat ``ServerClient`` (``ngym_nemo_gym.servers``, through ``ngym.plugin_api``) reads them to resolve the
server names a NeMo Gym environment calls:

- ``NGYM_SERVER_URLS``: a JSON object ``{"<server name>": "<http(s) base URL>"}`` (``--model-url NAME=URL``);
- ``NGYM_NEMO_GLOBAL_CONFIG``: the merged YAML tree the run was given, as JSON (NeMo Gym's global config).

Malformed values are a ``ValueError`` naming the variable; callers turn it into their own error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping
from typing import Any

SERVER_URLS_ENV = "NGYM_SERVER_URLS"
GLOBAL_CONFIG_ENV = "NGYM_NEMO_GLOBAL_CONFIG"


def _environ(environ: MutableMapping[str, str] | None) -> MutableMapping[str, str]:
    return os.environ if environ is None else environ


def read_server_urls(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The server URLs the run carries (``{}`` when unset); ``ValueError`` when the value is malformed."""
    raw = _environ(environ).get(SERVER_URLS_ENV, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{SERVER_URLS_ENV} is not JSON: {exc}") from None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f'{SERVER_URLS_ENV} must be a JSON object of name to URL, e.g. {{"judge": "http://..."}}')
    return value


def write_server_urls(urls: Mapping[str, str], environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Add ``urls`` to the carried server URLs (a name given here wins) and return the result; every URL must be
    http(s) (``ValueError`` naming the server otherwise). Nothing is written when the result is empty."""
    merged = {**read_server_urls(environ), **{str(k): str(v) for k, v in urls.items()}}
    for name, url in merged.items():
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"URL of server {name!r} must start with http:// or https://, got {url!r}")
    if merged:
        _environ(environ)[SERVER_URLS_ENV] = json.dumps(merged, sort_keys=True)
    return merged


def read_global_config(environ: MutableMapping[str, str] | None = None) -> dict[str, Any]:
    """The carried global config (``{}`` when unset); ``ValueError`` when it is not a JSON object."""
    raw = _environ(environ).get(GLOBAL_CONFIG_ENV)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{GLOBAL_CONFIG_ENV} is not a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{GLOBAL_CONFIG_ENV} is not a JSON object")
    return value


def write_global_config(tree: Mapping[str, Any], environ: MutableMapping[str, str] | None = None) -> None:
    """Carry ``tree`` (plain JSON-able values; others become strings) as the run's global config."""
    _environ(environ)[GLOBAL_CONFIG_ENV] = json.dumps(dict(tree), default=str)
