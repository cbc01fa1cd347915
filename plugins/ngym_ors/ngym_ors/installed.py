"""``ngym_ors.installed:<name>``: the server class of installed ORS environment ``<name>``.

A module attribute per installed environment (PEP 562 ``__getattr__``), so the registry's ``module:Class``
targets import in any process (``ngym run`` children, workers) the same way.
"""

from __future__ import annotations

from typing import Any

from ngym_ors import records
from ngym_ors.server import server_class

_made: dict[str, type[Any]] = {}


def __getattr__(name: str) -> type[Any]:
    if name.startswith("__"):
        raise AttributeError(name)
    if name not in _made:
        try:
            record = records.read(name)
        except KeyError:
            raise AttributeError(f"no ORS environment {name!r} is installed (ngym list)") from None
        cls = server_class(record)
        cls.__module__ = __name__
        cls.__qualname__ = name
        _made[name] = cls
    return _made[name]
