"""What ``ngym list --available nemo-gym`` shows: the wheel's environments, each marked when installed."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from ngym_nemo_gym.catalogue.folder import distribution_name
from ngym_nemo_gym.catalogue.wheel import NEMO_GYM_VERSION, available_environments


def installed_nemo_environments() -> dict[str, str]:
    """NeMo Gym environment (folder) name → the ngym name it is registered under, for those installed.

    Read from entry-point metadata only: ``ngym-nemo-<name>`` distributions and their entry points.
    """
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        dist_name = (dist.metadata["Name"] or "").lower()
        if not dist_name.startswith("ngym-nemo-") or dist_name == "ngym-nemo-gym":
            continue
        for ep in dist.entry_points.select(group="ngym.resources_servers"):
            module = ep.value.partition(":")[0].split(".")
            if len(module) >= 2 and module[0] == "resources_servers" and distribution_name(module[1]) == dist_name:
                found[module[1]] = ep.name
    return found


def available_with_status() -> list[dict[str, Any]]:
    installed = installed_nemo_environments()
    return [
        {**env.as_dict(), "version": NEMO_GYM_VERSION, "installed_as": installed.get(env.name)}
        for env in available_environments()
    ]
