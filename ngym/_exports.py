"""Public names written once: a package's ``if TYPE_CHECKING:`` imports are both what type checkers see and, read
at run time, the table its names load from on first use.

A package (``ngym``, ``ngym.plugin_api``) lists each public name once, as ``from module import name as name``
inside ``if TYPE_CHECKING:`` (the ``as`` form marks a re-export for ``mypy --strict`` and editors), or as
``public = _module.name`` for a name exported under another name, then::

    __getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)

``import ngym`` then loads no server runtime (FastAPI, pydantic models) until a name is used. The block is read
with a small scanner, not ``ast`` (whose import alone costs more than the rest of ``import ngym``).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from typing import Any

_IMPORT = re.compile(r"from\s+([\w.]+)\s+import\s+(\([^)]*\)|[^\n]*)")
_NAME = re.compile(r"^([A-Za-z_]\w*)(?:\s+as\s+([A-Za-z_]\w*))?$")
_ASSIGN = re.compile(r"^\s+([A-Za-z]\w*)\s*=\s*(_\w+)\.(\w+)\s*$", re.MULTILINE)


def exports_of(source: str) -> dict[str, tuple[str, str]]:
    """public name → (module, name in that module), from the ``if TYPE_CHECKING:`` block of ``source``."""
    start = source.index("\nif TYPE_CHECKING:")
    end = re.compile(r"\n\S").search(source, start + 1)
    block = source[start : end.start() if end else len(source)]
    block = re.sub(r"#[^\n]*", "", block)
    table: dict[str, tuple[str, str]] = {}
    for module, names in _IMPORT.findall(block):
        for item in names.strip("()").replace("\n", " ").split(","):
            match = _NAME.match(item.strip())
            if item.strip() and match is None:
                raise ValueError(f"cannot read the export {item.strip()!r} of {module}")
            if match is not None:
                table[match.group(2) or match.group(1)] = (module, match.group(1))
    # A name exported under another name than its own: ``public = _module.name`` after ``from p import m as _module``
    # (an assignment, which checkers export; ``import name as public`` they would not).
    private = {name: f"{module}.{attr}" for name, (module, attr) in table.items() if name.startswith("_")}
    for public, alias, attr in _ASSIGN.findall(block):
        if alias not in private:
            raise ValueError(f"cannot read the export {public!r}: {alias!r} is not an imported module")
        table[public] = (private[alias], attr)
    return {name: export for name, export in table.items() if not name.startswith("_")}


def lazy_exports(
    package: str, path: str, *extra: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` (the exports, then ``extra``) of ``package`` whose source is at
    ``path``: a name is imported from its module on first use and kept in the package's namespace."""
    with open(path, encoding="utf-8") as file:
        table = exports_of(file.read())
    namespace = sys.modules[package].__dict__
    names = [*table, *extra]

    def __getattr__(name: str) -> Any:
        export = table.get(name)
        if export is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(export[0])
        try:
            value = getattr(module, export[1])
        except AttributeError:  # a submodule not imported yet (``from ngym.server.protocol import failure_kinds``)
            value = importlib.import_module(f"{export[0]}.{export[1]}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__, names
