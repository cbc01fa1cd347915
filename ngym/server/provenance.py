"""Which installed distribution provides a server class (for ``/health``).

Read from the registry's entry-point metadata, which sees every install, editable flat-layout ones
included (``importlib.metadata.packages_distributions`` misses those: their top-level package is mapped
by a setuptools finder, not listed in the distribution's files).
"""

from __future__ import annotations

from importlib import metadata


def distribution_of(cls: type) -> tuple[str, str] | None:
    """(name, version) of the distribution that registered ``cls`` (or whose top-level package holds it)."""
    from ngym.plugins.registry import get_registry

    target = f"{cls.__module__}:{cls.__qualname__}"
    top = cls.__module__.split(".")[0]
    entries = list(get_registry().all_entries())
    for matches in (
        lambda e: e.target == target,
        lambda e: e.module.split(".")[0] == top,
    ):
        for entry in entries:
            if matches(entry) and entry.distribution:
                return entry.distribution, entry.version or ""
    dists = metadata.packages_distributions().get(top)
    if dists:
        dist = metadata.distribution(dists[0])
        return dist.metadata["Name"], dist.version
    return None
