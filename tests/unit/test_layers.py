"""The package's layers, asserted on its real import graph (grimp; imports under TYPE_CHECKING excluded).

- no import cycle anywhere in ``ngym`` (function-level imports count: a cycle hidden in a function is a cycle);
- the server runtime (``ngym.server``) imports only itself, the foundation (``domain``, ``errors``,
  ``config``) and the plugin hooks it calls (``plugins.hookspecs``, ``plugins.manager``): never the CLI or
  the tooling (validate, containerize, profiling, rollout, targets, testing, the registry);
- the plugin hooks and manager import nothing of the runtime they are called from;
- nothing outside ``ngym.cli`` imports the CLI.
"""

from __future__ import annotations

import functools
from pathlib import Path

import grimp
import pytest

RUNTIME = "ngym.server"
RUNTIME_MAY_IMPORT = {
    "ngym.domain",
    "ngym.errors",
    "ngym.config",
    "ngym.plugins",
    "ngym.plugins.hookspecs",
    "ngym.plugins.manager",
}


@functools.cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("ngym", exclude_type_checking_imports=True)


def internal_imports(module: str) -> set[str]:
    return {m for m in graph().find_modules_directly_imported_by(module) if m.split(".")[0] == "ngym"}


def cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), i.e. the import cycles."""
    modules = sorted(graph().modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(internal_imports(module)):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_there_is_no_import_cycle() -> None:
    assert cycles() == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: an added edge server.base -> server.host closes a cycle it reports."""
    g = graph()
    g.add_import(importer="ngym.server.base", imported="ngym.server.host")
    try:
        assert any({"ngym.server.base", "ngym.server.host"} <= set(c) for c in cycles())
    finally:
        g.remove_import(importer="ngym.server.base", imported="ngym.server.host")
    assert cycles() == []


@pytest.mark.parametrize("module", sorted(m for m in graph().modules if m == RUNTIME or m.startswith(RUNTIME + ".")))
def test_the_server_runtime_imports_nothing_from_the_cli_or_the_tooling(module: str) -> None:
    outside = {m for m in internal_imports(module) if not (m == RUNTIME or m.startswith(RUNTIME + "."))}
    assert outside <= RUNTIME_MAY_IMPORT, f"{module} imports {sorted(outside - RUNTIME_MAY_IMPORT)}"


@pytest.mark.parametrize("module", ["ngym.plugins.hookspecs", "ngym.plugins.manager"])
def test_the_plugin_hooks_import_nothing_of_the_runtime(module: str) -> None:
    assert not {m for m in internal_imports(module) if m.startswith(RUNTIME)}


#: The image's entrypoint is a command line too (``ngym ...`` with overrides from the environment).
CLI_EDGES = {"ngym.containerize.entrypoint"}


def test_only_the_cli_imports_the_cli() -> None:
    importers = {
        importer
        for module in graph().modules
        if module == "ngym.cli" or module.startswith("ngym.cli.")
        for importer in graph().find_modules_that_directly_import(module)
    }
    assert {m for m in importers if not (m == "ngym.cli" or m.startswith("ngym.cli."))} <= CLI_EDGES


def test_every_public_name_is_typed_for_checkers_and_exported() -> None:
    """``ngym.__all__``, the lazy table and the TYPE_CHECKING imports name the same things."""
    import ast

    import ngym

    tree = ast.parse(Path(ngym.__file__).read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    typed = {alias.asname or alias.name for node in guarded.body for alias in node.names}  # type: ignore[attr-defined]
    assert typed == set(ngym._EXPORTS) == set(ngym.__all__) - {"__version__"}
    for name in ngym.__all__:
        assert getattr(ngym, name) is not None
