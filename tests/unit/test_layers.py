"""The package's layers, asserted on its real import graph (grimp; imports under TYPE_CHECKING excluded).

- no import cycle anywhere in ``ngym`` (function-level imports count: a cycle hidden in a function is a cycle);
- the server runtime (``ngym.server``) imports only itself, the foundation (``domain``, ``errors``,
  ``config``), the statistics (``ngym.metrics``) and the plugin hooks it calls (``plugins.hookspecs``,
  ``plugins.manager``): never the CLI or the tooling (validate, containerize, profiling, rollout, targets,
  testing, the registry);
- inside the runtime, process hosting (``ngym.server.hosting``) and the protocol fronts (``ngym.server.fronts``)
  are built on the request pipeline (``ngym.server.pipeline``); the pipeline imports neither (they plug into it
  through ``pipeline.extensions``), and hosting and fronts import nothing of each other;
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
    "ngym.metrics",  # the statistics /aggregate_metrics answers with
    "ngym.metrics.aggregate",
    "ngym.metrics.repeats",
    "ngym.rewards",  # the reward rule /health reports (stdlib only)
    "ngym.child_python",  # how a supervisor starts its workers without the current folder on sys.path (stdlib only)
    "ngym.processes",  # how the supervisor starts, waits for and stops its workers and HAProxy (stdlib + errors)
    "ngym.jsonl",  # reading a JSON-lines file of rows, as the tooling reads one (stdlib + errors)
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
    g.add_import(importer="ngym.server.pipeline.base", imported="ngym.server.hosting.host")
    try:
        assert any({"ngym.server.pipeline.base", "ngym.server.hosting.host"} <= set(c) for c in cycles())
    finally:
        g.remove_import(importer="ngym.server.pipeline.base", imported="ngym.server.hosting.host")
    assert cycles() == []


@pytest.mark.parametrize("module", sorted(m for m in graph().modules if m == RUNTIME or m.startswith(RUNTIME + ".")))
def test_the_server_runtime_imports_nothing_from_the_cli_or_the_tooling(module: str) -> None:
    outside = {m for m in internal_imports(module) if not (m == RUNTIME or m.startswith(RUNTIME + "."))}
    assert outside <= RUNTIME_MAY_IMPORT, f"{module} imports {sorted(outside - RUNTIME_MAY_IMPORT)}"


PIPELINE, HOSTING, FRONTS = "ngym.server.pipeline", "ngym.server.hosting", "ngym.server.fronts"


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def edges_out_of(package: str, into: tuple[str, ...], g: grimp.ImportGraph | None = None) -> set[tuple[str, str]]:
    """(importer, imported) for every import from a module of ``package`` into a module of any of ``into``."""
    g = g or graph()
    return {
        (module, imported)
        for module in g.modules
        if within(module, package)
        for imported in g.find_modules_directly_imported_by(module)
        if any(within(imported, other) for other in into)
    }


def test_the_server_packages_are_the_three_jobs() -> None:
    """Every module of the runtime sits in one of its packages (none left loose beside them)."""
    packages = (PIPELINE, HOSTING, FRONTS, "ngym.server.sessions", "ngym.server.protocol")
    loose = {
        m for m in graph().modules if within(m, RUNTIME) and m != RUNTIME and not any(within(m, p) for p in packages)
    }
    assert loose == set()


def test_the_pipeline_imports_neither_hosting_nor_fronts() -> None:
    assert edges_out_of(PIPELINE, (HOSTING, FRONTS)) == set()


def test_the_pipeline_layer_check_can_fail() -> None:
    """An added edge from the middleware to the HAProxy module is reported."""
    g = graph()
    g.add_import(importer="ngym.server.pipeline.middleware", imported="ngym.server.hosting.haproxy")
    try:
        assert edges_out_of(PIPELINE, (HOSTING, FRONTS), g) == {
            ("ngym.server.pipeline.middleware", "ngym.server.hosting.haproxy")
        }
    finally:
        g.remove_import(importer="ngym.server.pipeline.middleware", imported="ngym.server.hosting.haproxy")


def test_hosting_and_fronts_import_nothing_of_each_other() -> None:
    assert edges_out_of(HOSTING, (FRONTS,)) == set()
    assert edges_out_of(FRONTS, (HOSTING,)) == set()


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


def typed_exports(path: str) -> dict[str, bool]:
    """The public names a module's ``if TYPE_CHECKING:`` block (or, without one, the module) defines for type
    checkers, each with whether ``mypy --strict`` exports it: ``import x as x`` and an assignment are exported,
    ``import x`` and ``import x as y`` are not."""
    import ast

    tree = ast.parse(Path(path).read_text())
    guarded = next((n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)), None)
    names: dict[str, bool] = {}
    for node in guarded.body if guarded is not None else tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ngym"):
            names.update({a.asname or a.name: a.asname == a.name for a in node.names})
        elif isinstance(node, ast.Assign):
            names.update({target.id: True for target in node.targets if isinstance(target, ast.Name)})
    return {name: exported for name, exported in names.items() if not name.startswith("_")}


@pytest.mark.parametrize("package", ["ngym", "ngym.plugin_api", "ngym.server.protocol"])
def test_every_public_name_is_written_once_typed_and_exported(package: str) -> None:
    """A package's public names are what it defines for type checkers (each exported under ``mypy --strict``),
    its ``__all__`` is derived from them, and every one resolves at run time."""
    import importlib

    module = importlib.import_module(package)
    typed = typed_exports(str(module.__file__))
    assert typed and all(typed.values()), f"not exported to checkers: {[n for n, ok in typed.items() if not ok]}"
    assert set(typed) == set(module.__all__) - {"__version__"}
    assert len(module.__all__) == len(set(module.__all__))
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_a_name_read_as_an_export_resolves_to_the_named_object() -> None:
    from ngym import _exports, envtest, plugin_api
    from ngym.server.fronts import mcp
    from ngym.server.protocol import failure_kinds

    table = _exports.exports_of(Path(str(plugin_api.__file__)).read_text())
    assert table["install_mcp"] == ("ngym.server.fronts.mcp", "install")
    assert plugin_api.install_mcp is mcp.install
    assert plugin_api.environment_test_command is envtest.pytest_command
    assert plugin_api.failure_kinds is failure_kinds
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        plugin_api.nothing  # noqa: B018


def test_the_export_reader_refuses_what_it_cannot_read() -> None:
    from ngym import _exports

    source = "x = 1\nif TYPE_CHECKING:\n    from ngym.domain import (Domain as Domain, *)\n"
    with pytest.raises(ValueError, match="cannot read the export"):
        _exports.exports_of(source)


# ---- plugins use ngym's public API only ----------------------------------------------------------------------------

#: The import packages under plugins/ (not their tests, which may reach into what they test).
PLUGIN_PACKAGES = ("nemo_gym", "ngym_nemo_gym", "ngym_openenv", "ngym_ors", "ngym_redis", "ngym_verifiers")
#: What a plugin may import of ngym: the package's names, the plugin API and the statistics (``ngym.metrics``, its
#: modules included: NeMo Gym's ``reward_profile`` is one).
PLUGIN_MAY_IMPORT = {"ngym", "ngym.plugin_api", "ngym.metrics"}


def may_import(module: str) -> bool:
    return module in PLUGIN_MAY_IMPORT or module.startswith("ngym.metrics.")


PLUGINS_DIR = Path(__file__).resolve().parents[2] / "plugins"


@functools.cache
def plugin_graph() -> grimp.ImportGraph:
    # TYPE_CHECKING imports count here: an annotation naming an internal class ties the plugin to it too.
    # No cache: a cached graph kept modules whose package had since lost its __init__.py (grimp then no longer
    # sees them), so the check below passed on a stale graph. Building it afresh takes about a second.
    return grimp.build_graph("ngym", *PLUGIN_PACKAGES, cache_dir=None)


def ngym_imports_of_plugins(g: grimp.ImportGraph) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for module in sorted(g.modules):
        if module.split(".")[0] in PLUGIN_PACKAGES:
            imported = {m for m in g.find_modules_directly_imported_by(module) if m.split(".")[0] == "ngym"}
            if refused := {m for m in imported if not may_import(m)}:
                found[module] = refused
    return found


def test_plugins_import_only_the_public_api_of_ngym() -> None:
    assert ngym_imports_of_plugins(plugin_graph()) == {}


def test_the_plugin_import_check_can_fail() -> None:
    """An added edge from the Redis store to the middleware is reported."""
    g = plugin_graph()
    g.add_import(importer="ngym_redis.store", imported="ngym.server.pipeline.middleware")
    try:
        assert ngym_imports_of_plugins(g) == {"ngym_redis.store": {"ngym.server.pipeline.middleware"}}
    finally:
        g.remove_import(importer="ngym_redis.store", imported="ngym.server.pipeline.middleware")


def private_ngym_names(source: str) -> list[str]:
    """Private names a plugin's source imports from ngym (``from ngym.x import _y``) or reads off an ngym object
    (``server._ngym_sessions``, ``ngym.x._y``): the core's internals, whatever module they sit in."""
    import ast

    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ngym":
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        if isinstance(node, ast.Attribute) and node.attr.startswith(("_ngym", "_request_session", "_mcp")):
            found.append(ast.unparse(node))
    return found


def test_plugins_use_no_private_name_of_ngym() -> None:
    sources = [p for package in PLUGINS_DIR.iterdir() for p in package.rglob("*.py") if "tests" not in p.parts]
    assert sources
    found = {str(p.relative_to(PLUGINS_DIR)): names for p in sources if (names := private_ngym_names(p.read_text()))}
    assert found == {}


def test_the_private_name_check_can_fail() -> None:
    source = "from ngym.server.pipeline.routes import _read_json\nmanager = server._ngym_sessions\n"
    assert private_ngym_names(source) == ["ngym.server.pipeline.routes._read_json", "server._ngym_sessions"]


# ---- the NeMo compat distribution: one direction between its two packages ------------------------------------------

#: ``nemo_gym`` (NeMo Gym's names, what environments import; it holds the collector behind
#: ``nemo_gym.rollout_collection``) is built on ``ngym_nemo_gym`` (ngym's side: the run's carriers, an environment's
#: tests), never the other way: ngym's tooling imports ``ngym_nemo_gym`` without loading NeMo's API.
COMPAT_API, COMPAT_TOOLING = "nemo_gym", "ngym_nemo_gym"


def compat_back_imports(g: grimp.ImportGraph) -> set[tuple[str, str]]:
    """(importer, imported) for every import of ``nemo_gym`` by ``ngym_nemo_gym``, deferred or TYPE_CHECKING ones
    included, plus an indirect chain between the packages (through ngym, say) when there is one."""
    direct = {
        (module, imported)
        for module in g.modules
        if module.split(".")[0] == COMPAT_TOOLING
        for imported in g.find_modules_directly_imported_by(module)
        if imported.split(".")[0] == COMPAT_API
    }
    if not direct and g.chain_exists(importer=COMPAT_TOOLING, imported=COMPAT_API, as_packages=True):
        chain = g.find_shortest_chain(importer=COMPAT_TOOLING, imported=COMPAT_API, as_packages=True) or ()
        direct.add((chain[0], chain[-1]) if chain else (COMPAT_TOOLING, COMPAT_API))
    return direct


def plugin_modules_on_disk() -> set[str]:
    """The dotted name of every module file of the plugin packages (``plugins/<distribution>/<package>/...``)."""
    found = set()
    for path in PLUGINS_DIR.glob("*/*/**/*.py"):
        parts = path.relative_to(PLUGINS_DIR).with_suffix("").parts[1:]
        if parts[0] in PLUGIN_PACKAGES and "tests" not in parts:
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_the_import_checks_see_every_module_of_the_plugins() -> None:
    """grimp leaves out a folder without ``__init__.py`` (a namespace package), and every check above with it:
    ngym-nemo-gym's collector once sat in such a folder, unchecked, importing ``nemo_gym`` back."""
    on_disk = plugin_modules_on_disk()
    assert {"nemo_gym._collection.runner", "ngym_nemo_gym.servers", "ngym_redis"} <= on_disk
    assert on_disk - set(plugin_graph().modules) == set()


def test_the_compat_packages_import_each_other_one_way_only() -> None:
    g = plugin_graph()
    assert g.chain_exists(importer=COMPAT_API, imported=COMPAT_TOOLING, as_packages=True)  # the allowed direction
    assert compat_back_imports(g) == set()


def test_the_compat_direction_check_can_fail() -> None:
    """An added edge from the carriers module back to NeMo's global config is reported (a cycle between them)."""
    g = plugin_graph()
    g.add_import(importer="ngym_nemo_gym.servers", imported="nemo_gym.global_config")
    try:
        assert compat_back_imports(g) == {("ngym_nemo_gym.servers", "nemo_gym.global_config")}
    finally:
        g.remove_import(importer="ngym_nemo_gym.servers", imported="nemo_gym.global_config")
    assert compat_back_imports(g) == set()


# ---- one process lifecycle -----------------------------------------------------------------------------------------

NGYM_DIR = Path(__file__).resolve().parents[2] / "ngym"
#: Modules that handle a process themselves, and why: they start a child to read its output (pip's, a containerize
#: run's progress), not to supervise it, or ask another ``ngym up`` (not a child) to stop.
OWN_PROCESS_HANDLING = {
    "ngym/installer.py": "pip's output, read as it runs",
    "ngym/fleet/compose.py": "a containerize run's progress lines, read as they come",
    "ngym/fleet/lock.py": "SIGTERM to the `ngym up` holding the fleet's lock",
}


def process_handling(source: str) -> list[str]:
    """The calls in ``source`` that start, signal or kill a process themselves (``subprocess.Popen``, ``os.kill``,
    ``os.killpg``, ``.send_signal``, ``.terminate``, ``.kill``): what ``ngym.processes`` is for."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = ast.unparse(node.func)
            if ast.unparse(node.func.value) in {"processes", "ray"}:  # ngym.processes itself; a Ray actor
                continue
            if name in {"subprocess.Popen", "os.kill", "os.killpg"} or node.func.attr in {
                "send_signal", "terminate", "kill"
            }:  # fmt: skip
                found.append(name)
    return found


def test_processes_are_started_and_stopped_by_ngym_processes_only() -> None:
    """child_server, the affine workers, serve_many and the fleet's engines spawn, stop and wait through
    ``ngym.processes``: no second copy of that code."""
    found = {
        str(path.relative_to(NGYM_DIR.parent)): calls
        for path in sorted(NGYM_DIR.rglob("*.py"))
        if path.name != "processes.py" and (calls := process_handling(path.read_text()))
    }
    assert set(found) == set(OWN_PROCESS_HANDLING), found


def test_the_process_check_can_fail() -> None:
    source = "child = subprocess.Popen(['x'])\nchild.send_signal(15)\nos.killpg(1, 9)\nprocesses.stop(child)\n"
    assert process_handling(source) == ["subprocess.Popen", "child.send_signal", "os.killpg"]


# ---- the test suite is imported by tests only ----------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def imports_of_tests(source: str) -> list[str]:
    """The modules of the ``tests`` package that ``source`` imports (``import tests.x``, ``from tests.x import y``)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "tests":
            found.append(str(node.module))
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "tests"]
    return found


def test_nothing_outside_the_test_suite_imports_it() -> None:
    """bench/, tools/, the package, the plugins and the environments import what they share with the tests from
    ``ngym.testing``; a plugin's or environment's own ``tests/`` may import its siblings."""
    sources = [
        path
        for folder in ("ngym", "bench", "tools", "plugins", "resources_servers")
        for path in (REPO / folder).rglob("*.py")
        if "tests" not in path.relative_to(REPO).parts
    ]
    assert len(sources) > 100
    found = {str(p.relative_to(REPO)): names for p in sources if (names := imports_of_tests(p.read_text()))}
    assert found == {}


def test_the_tests_import_check_can_fail() -> None:
    source = "import tests.netns\nfrom tests.support.cli_runs import run_ngym\nfrom .tests import x\nimport testsuite\n"
    assert imports_of_tests(source) == ["tests.netns", "tests.support.cli_runs"]


# ---- small modules -------------------------------------------------------------------------------------------------

MAX_MODULE_LINES = 500


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    """The package, plugin, environment, bench and tools modules (tests aside) over ``limit`` lines, with their
    length."""
    found = {}
    for folder in ("ngym", "plugins", "resources_servers", "bench", "tools"):
        for path in (root / folder).rglob("*.py"):
            relative = path.relative_to(root)
            if "tests" in relative.parts or ".venv" in relative.parts:
                continue
            lines = len(path.read_text().splitlines())
            if lines > limit:
                found[str(relative)] = lines
    return found


def test_no_module_is_over_500_lines() -> None:
    """A module over 500 lines holds more than one job: split it by job (``worker.py`` / ``worker_legacy.py``)."""
    assert long_modules(REPO) == {}


def test_the_module_length_check_can_fail() -> None:
    assert "ngym/processes.py" in long_modules(REPO, limit=100)
