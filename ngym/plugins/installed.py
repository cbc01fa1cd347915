"""The ``installed`` module of an ecosystem plugin: one server class per installed environment, by name.

A plugin's ``<package>.installed`` module gets its PEP 562 ``__getattr__`` from ``installed_classes``, so the
registry's ``<package>.installed:<name>`` targets import the same way in every process (``ngym run`` children,
workers, fleet units)::

    __getattr__ = installed_classes(__name__, "ORS", records.read, server_class)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


def installed_classes(
    module: str, kind: str, read: Callable[[str], R], make: Callable[[R], type[Any]]
) -> Callable[[str], type[Any]]:
    """A module ``__getattr__``: ``name`` → ``make(read(name))``, made once, named ``module.name``.

    ``read`` raises ``KeyError`` for a name that is not installed: the attribute is then missing, with a message
    saying so (``kind`` names the ecosystem in it)."""
    made: dict[str, type[Any]] = {}

    def lookup(name: str) -> type[Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in made:
            try:
                record = read(name)
            except KeyError:
                raise AttributeError(f"no {kind} environment {name!r} is installed (ngym list)") from None
            cls = make(record)
            cls.__module__ = module
            cls.__qualname__ = name
            made[name] = cls
        return made[name]

    return lookup
