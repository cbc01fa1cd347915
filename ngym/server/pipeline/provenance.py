"""Which installed distribution provides a server class (for ``/health``), from package metadata alone.

Looked up in the entry points that name it (``ngym.resources_servers``, or an ``ngym`` hook plugin of the
same top-level package: a hook-registered environment), which see every install, editable flat-layout ones
included (``importlib.metadata.packages_distributions`` misses those: their top-level package is mapped by
a setuptools finder, not listed in the distribution's files), then in ``packages_distributions``.
"""

from __future__ import annotations

import functools
from importlib import metadata

#: Entry-point groups whose values name a class's module: environments, then hook plugins.
_GROUPS = ("ngym.resources_servers", "ngym")


@functools.cache
def distribution_of(cls: type) -> tuple[str, str] | None:
    """(name, version) of the distribution that provides ``cls`` (or whose top-level package holds it)."""
    target = f"{cls.__module__}:{cls.__qualname__}"
    top = cls.__module__.split(".")[0]
    entry_points = [ep for group in _GROUPS for ep in metadata.entry_points(group=group)]

    def same_class(value: str) -> bool:
        return value == target

    def same_package(value: str) -> bool:
        return value.partition(":")[0].strip().split(".")[0] == top

    for matches in (same_class, same_package):
        for ep in entry_points:
            if matches(ep.value.strip()) and ep.dist is not None:
                return ep.dist.metadata["Name"], ep.dist.version
    dists = metadata.packages_distributions().get(top)
    if dists:
        dist = metadata.distribution(dists[0])
        return dist.metadata["Name"], dist.version
    return None
