"""``ngym list`` and ``ngym plugins``: what is installed, as plain data (the CLI only renders it)."""

from __future__ import annotations

from typing import Any

from ngym.errors import PluginError
from ngym.plugins.cache import InspectionCache, entry_key
from ngym.plugins.manager import STRICT_ENV, NgymPluginManager, strict_mode
from ngym.plugins.registry import BROKEN, OK, Registry, ServerEntry
from ngym.plugins.server_info import ServerInfo


def _info(entry: ServerEntry, domain: str | None, description: str, reason: str | None) -> ServerInfo:
    return ServerInfo(
        name=entry.name,
        domain=domain,
        distribution=entry.distribution,
        version=entry.version,
        description=description,
        status=BROKEN if reason else OK,
        reason=reason,
        target=entry.target,
    )


def inspect_entry(registry: Registry, entry: ServerEntry, cache: InspectionCache | None) -> ServerInfo:
    """An entry's row: from the cache when its key is fresh, else by loading (importing) it once."""
    if entry.clash is not None:
        return _info(entry, entry.declared_domain, entry.declared_description or "", entry.clash)
    key = entry_key(entry) if cache is not None and entry.server_class is None else None
    if key is not None and cache is not None:
        cached = cache.get(key)
        if cached is not None:
            return _info(entry, cached.get("domain"), cached.get("description", ""), cached.get("reason"))
    spec = registry.load(entry)
    if spec is not None:
        info = _info(entry, spec.domain.value, spec.description, None)
    else:
        info = _info(entry, entry.declared_domain, entry.declared_description or "", entry.error)
    if key is not None and cache is not None and info.reason is None:  # broken ones are retried every time
        cache.put(key, {"domain": info.domain, "description": info.description, "reason": None})
    return info


def list_servers(registry: Registry, *, use_cache: bool = True) -> list[ServerInfo]:
    """Every registered server (broken ones included) and every hook plugin that failed to load."""
    cache = InspectionCache() if use_cache else None
    rows = [inspect_entry(registry, entry, cache) for entry in registry.all_entries()]
    if cache is not None:
        cache.save()
    for problem in registry.problems:
        if problem.kind == "hook plugin":
            rows.append(
                ServerInfo(
                    name=problem.plugin,
                    domain=None,
                    distribution=problem.distribution,
                    version=problem.version,
                    description="",
                    status=BROKEN,
                    reason=problem.reason,
                    target="",
                    kind="hook_plugin",
                )
            )
    return rows


def check_strict(rows: list[ServerInfo]) -> None:
    """In strict mode, any broken row is an error naming every broken plugin."""
    broken = [r for r in rows if r.status == BROKEN]
    if broken and strict_mode():
        lines = "; ".join(f"{r.name} ({r.distribution or 'no distribution'}): {r.reason}" for r in broken)
        raise PluginError(f"{len(broken)} broken plugin(s) ({STRICT_ENV}=1): {lines}")


def hook_plugins(pm: NgymPluginManager) -> list[dict[str, Any]]:
    """Every registered hook plugin with its distribution and the hooks it implements, plus broken ones."""
    rows: list[dict[str, Any]] = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        origin = pm.origin(name)
        rows.append(
            {
                "name": name,
                "distribution": origin.distribution,
                "version": origin.version,
                "entry_point": origin.entry_point,
                "hooks": pm.hooks_of(plugin),
                "status": OK,
                "reason": None,
            }
        )
    for problem in pm.problems:
        if problem.kind == "hook plugin":
            rows.append(
                {
                    "name": problem.plugin,
                    "distribution": problem.distribution,
                    "version": problem.version,
                    "entry_point": None,
                    "hooks": [],
                    "status": BROKEN,
                    "reason": problem.reason,
                }
            )
    return rows
