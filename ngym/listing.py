"""``ngym list`` and ``ngym list --hooks``: what is installed, as plain data (the CLI only renders it).

A server's domain and description live in its code, so listing it means importing it once. The result is
kept in ngym's one cache, ``$NGYM_CACHE_DIR/plugins.json`` (default ``$XDG_CACHE_HOME/ngym``, else
``~/.cache/ngym``), keyed by everything that would change it: distribution, version, entry point, and the
size and mtime of the server's module file and of its ``configs/<name>.yaml`` (read with ``stat`` after
*finding*, not importing, the top-level package, so an edit to an editable install is seen at once). It
earns its place with ``bench/bench_list.py``: with 30 installed plugins a cold listing imports every one of
them, a warm one none. Only good results are kept: a broken plugin is imported again every time (a missing
dependency may have been installed since). A cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ngym.config import cache_dir, module_file
from ngym.errors import PluginError
from ngym.plugins.manager import STRICT_ENV, NgymPluginManager, strict_mode
from ngym.plugins.registry import BROKEN, OK, Registry, ServerEntry

CACHE_FILE = "plugins.json"
FORMAT = 1


@dataclass
class ServerInfo:
    """One row of ``ngym list``."""

    name: str
    domain: str | None
    distribution: str | None
    version: str | None
    description: str
    status: str  # "ok" | "broken"
    reason: str | None
    target: str
    kind: str = "resources_server"  # or "hook_plugin" (a hook plugin that failed to load)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def file_stamp(path: Path | None) -> str:
    """``mtime_ns:size`` of a file, ``-`` when it is missing: changes when the file is edited or replaced."""
    if path is None:
        return "-"
    try:
        st = path.stat()
    except OSError:
        return "-"
    return f"{st.st_mtime_ns}:{st.st_size}"


def entry_key(entry: ServerEntry) -> str | None:
    """The cache key of an entry, or None when its module file cannot be located (then it is not cached)."""
    source = module_file(entry.module)
    if source is None:
        return None
    return "|".join(
        [
            f"{entry.distribution}=={entry.version}",
            f"{entry.name}={entry.target}",
            f"{source}@{file_stamp(source)}",
            f"config@{file_stamp(entry.config_file())}",
            f"decl={entry.declared_domain}/{entry.declared_description}",
        ]
    )


class InspectionCache:
    """A JSON file of key → inspection result; unused keys are dropped when it is saved."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_dir() / CACHE_FILE
        self._old: dict[str, dict[str, Any]] = self._read()
        self._new: dict[str, dict[str, Any]] = {}
        self.dirty = False

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
            return {}
        entries: dict[str, dict[str, Any]] = data["entries"]
        return entries

    def get(self, key: str) -> dict[str, Any] | None:
        value = self._old.get(key)
        if value is not None:
            self._new[key] = value
        return value

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._new[key] = value
        self.dirty = True

    def save(self) -> None:
        if not self.dirty and self._new.keys() == self._old.keys():
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".plugins-", suffix=".json")
            with os.fdopen(fd, "w") as fh:
                json.dump({"format": FORMAT, "entries": self._new}, fh)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only home: listing still works, it just imports again next time


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
        info = _info(
            entry, entry.declared_domain or _config_domain(entry), entry.declared_description or "", entry.error
        )
    if key is not None and cache is not None and info.reason is None:  # broken ones are retried every time
        cache.put(key, {"domain": info.domain, "description": info.description, "reason": None})
    return info


def _config_domain(entry: ServerEntry) -> str | None:
    """The domain a broken environment's config declares (so a broken row still says what it is)."""
    try:
        domain = entry.config_fields(resolve=False).get("domain")
    except Exception:  # the config itself may be what is broken; the row already carries the error
        return None
    return str(domain) if domain is not None else None


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
