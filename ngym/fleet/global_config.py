"""The NeMo-shaped global config a fleet serves: every server by name, with the address it really listens on.

NeMo Gym's clients (its rollout collector, agents, ``ServerClient``) look a server up by its top-level name and
read ``host``/``port`` from ``{name: {server_type: {implementation: {...}}}}``; a child server started by NeMo
Gym reads the whole dict from ``NEMO_GYM_CONFIG_DICT`` and indexes a few reserved keys directly
(``head_server``, ``dry_run``), so those are always present. An environment the fleet serves is a
``resources_servers`` entry whose implementation is the environment it serves; it has no ``entrypoint``: nothing
in the dict is a placeholder, NeMo Gym's ``gym env start`` launches only entries with one.
"""

from __future__ import annotations

from typing import Any

import yaml

from ngym.fleet.spec import FleetSpec

#: NeMo Gym 0.7.0's reserved top-level keys that its servers index directly, with its defaults.
NEMO_RESERVED_DEFAULTS: dict[str, Any] = {"dry_run": False}


def build_global_config(
    spec: FleetSpec,
    head: tuple[str, int],
    addresses: dict[str, tuple[str, int]],
    domains: dict[str, str | None],
) -> dict[str, Any]:
    """The global config: ``head_server``, each environment (as a resources server) and each other server.

    ``addresses`` maps every server name to where it listens; ``domains`` gives each environment's domain
    (read from its ``/health``), which NeMo Gym requires of a resources server.
    """
    config: dict[str, Any] = {"head_server": {"host": head[0], "port": head[1]}, **NEMO_RESERVED_DEFAULTS}
    for name, env in spec.environments.items():
        host, port = addresses[name]
        impl = env.env.removeprefix("nemo-gym:") if env.folder(spec.base_dir) is None else name  # what it serves
        entry: dict[str, Any] = {"host": host, "port": port}
        if domains.get(name):
            entry["domain"] = domains[name]
        config[name] = {"resources_servers": {impl: entry}}
    for name, server in spec.servers.items():
        host, port = addresses[name]
        config[name] = {server.server_type: {server.implementation: {**server.config, "host": host, "port": port}}}
    return config


def dump(config: dict[str, Any]) -> str:
    """YAML text of the config, as NeMo Gym's head server sends it (``OmegaConf.to_yaml`` reads the same)."""
    return yaml.safe_dump(config, sort_keys=False)
