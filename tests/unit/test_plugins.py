"""The plugin registry: fresh plugin managers per test, inline plugins, and fake installed distributions.

Fake distributions are real ``*.dist-info`` folders in a temporary directory put on ``sys.path``, so
``importlib.metadata`` (and therefore ngym) finds their entry points exactly as it finds installed ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from fastapi import FastAPI

from ngym import BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer
from ngym.errors import EnvironmentNotFound, PluginError
from ngym.listing import check_strict, hook_plugins, list_servers
from ngym.plugins import hookimpl
from ngym.plugins.manager import STRICT_ENV, make_plugin_manager
from ngym.plugins.registry import Register, build_registry, reset_registry

VALID_DOMAINS = ", ".join(d.value for d in Domain)

SERVER_MODULE = '''
from ngym import BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer
{extra}

class Server(SimpleResourcesServer):
    """{doc}"""
    config: BaseResourcesServerConfig
    domain = {domain}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)
'''


@pytest.fixture(autouse=True)
def lenient(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Not strict unless a test says so; a private inspection cache; no process-wide registry left over."""
    monkeypatch.delenv(STRICT_ENV, raising=False)
    monkeypatch.setenv("NGYM_CACHE_DIR", str(tmp_path / "cache"))
    reset_registry()
    yield
    reset_registry()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def make_dist(site: Path, dist: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]]) -> None:
    """Write an installed-looking distribution: ``<dist>-1.0.dist-info`` plus its modules."""
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in entry_points.items())
    )
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))


def env_dist(site: Path, env: str, domain: str = "Domain.AGENT", extra: str = "", doc: str = "A test env.") -> str:
    """A distribution registering one environment ``env`` via ``ngym.resources_servers``; its module name."""
    module = unique("envmod")
    make_dist(
        site,
        f"dist-{env}".replace("_", "-"),
        {module: SERVER_MODULE.format(domain=domain, extra=extra, doc=doc)},
        {"ngym.resources_servers": {env: f"{module}:Server"}},
    )
    return module


def rows_by_name(registry: Any) -> dict[str, Any]:
    return {r.name: r for r in list_servers(registry)}


class Good(SimpleResourcesServer):
    """Good: a valid inline server."""

    config: BaseResourcesServerConfig
    domain = Domain.MATH

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)


# ---- registration rules (inline hook plugins, fresh manager) ----------------------------------------------


def registry_with(*plugins: object) -> Any:
    pm = make_plugin_manager(load_entry_points=False, plugins=[(f"p{i}", p) for i, p in enumerate(plugins)])
    return build_registry(pm)


def registering(fn: Callable[[Register], None]) -> object:
    class Plugin:
        @hookimpl
        def ngym_register_resources_servers(self, register: Register) -> None:
            fn(register)

    return Plugin()


def test_register_add_records_a_validated_spec() -> None:
    registry = registry_with(registering(lambda r: r.add(Good, name="good_env", description="Counts to ten.")))
    spec = registry.get("good_env")
    assert (spec.name, spec.server_class, spec.domain) == ("good_env", Good, Domain.MATH)
    assert spec.description == "Counts to ten."
    assert spec.config_class is BaseResourcesServerConfig
    assert spec.target.endswith(":Good")


def test_invalid_domain_is_rejected_naming_the_valid_values() -> None:
    registry = registry_with(registering(lambda r: r.add(Good, name="bad_domain", domain="mathz")))
    problem = next(p for p in registry.problems if p.plugin == "bad_domain")
    assert "mathz" in problem.reason and VALID_DOMAINS in problem.reason
    with pytest.raises(PluginError, match="mathz"):
        registry.get("bad_domain")


def test_server_without_verify_is_rejected() -> None:
    class NoVerify(SimpleResourcesServer):
        config: BaseResourcesServerConfig
        domain = Domain.AGENT

    registry = registry_with(registering(lambda r: r.add(NoVerify, name="no_verify")))
    assert "does not implement verify" in registry.entries["no_verify"].error


def test_config_class_that_does_not_validate_is_rejected() -> None:
    class NeedsUrl(BaseResourcesServerConfig):
        judge_url: str

    class Judge(Good):
        config: NeedsUrl

    registry = registry_with(registering(lambda r: r.add(Judge, name="judge")))
    assert "NeedsUrl does not validate" in registry.entries["judge"].error
    assert "judge_url" in registry.entries["judge"].error


def test_missing_domain_and_bad_name_are_rejected() -> None:
    class NoDomain(Good):
        domain = None

    registry = registry_with(registering(lambda r: r.add(NoDomain, name="nodomain")))
    assert "declares no domain" in registry.entries["nodomain"].error
    registry = registry_with(registering(lambda r: r.add(Good, name="has space")))
    assert any("a server name is" in p.reason for p in registry.problems)


def test_a_hook_that_raises_is_reported_and_others_still_register() -> None:
    def explode(register: Register) -> None:
        raise RuntimeError("boom")

    registry = registry_with(registering(explode), registering(lambda r: r.add(Good, name="survivor")))
    assert registry.get("survivor").server_class is Good
    assert any("boom" in p.reason for p in registry.problems)


def test_strict_mode_makes_a_registration_problem_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(PluginError, match="mathz"):
        registry_with(registering(lambda r: r.add(Good, name="bad_domain", domain="mathz")))


def test_lazy_target_is_validated_when_used() -> None:
    registry = registry_with(registering(lambda r: r.add(f"{__name__}:Good", name="lazy", domain="math")))
    entry = registry.entries["lazy"]
    assert entry.spec is None and entry.declared_domain == "math"
    assert registry.get("lazy").server_class is Good


def test_unknown_name_lists_what_is_installed() -> None:
    registry = registry_with(registering(lambda r: r.add(Good, name="only_one")))
    with pytest.raises(EnvironmentNotFound, match="only_one"):
        registry.get("nope")


# ---- entry points: fake installed distributions ------------------------------------------------------------


def test_entry_point_environment_is_listed_without_import(site: Path) -> None:
    module = env_dist(site, "ep_env", doc="Listed from its entry point.")
    registry = build_registry(make_plugin_manager())
    assert module not in sys.modules  # registering reads metadata only
    row = rows_by_name(registry)["ep_env"]
    assert (row.status, row.domain, row.distribution, row.version) == ("ok", "agent", "dist-ep-env", "1.0")
    assert row.description == "Listed from its entry point."


def test_an_environment_without_a_docstring_is_described_by_its_config(site: Path) -> None:
    """A NeMo Gym environment installed by `ngym install nemo-gym:` says what it is in its YAML (`description:`),
    not in a docstring: `ngym list` showed it with an empty description."""
    env_dist(site, "yaml_described_env", doc="")
    (site / "configs").mkdir()
    (site / "configs" / "yaml_described_env.yaml").write_text(
        "yaml_described_env:\n  resources_servers:\n    yaml_described_env:\n      entrypoint: app.py\n"
        "      domain: agent\n      description: Described in its config.\n"
    )
    row = rows_by_name(build_registry(make_plugin_manager()))["yaml_described_env"]
    assert (row.status, row.description) == ("ok", "Described in its config."), row


def test_mathz_plugin_is_listed_broken_with_valid_domains(site: Path) -> None:
    env_dist(site, "mathz_env", domain='"mathz"')
    env_dist(site, "fine_env")
    rows = rows_by_name(build_registry(make_plugin_manager()))
    bad = rows["mathz_env"]
    assert bad.status == "broken" and bad.distribution == "dist-mathz-env"
    assert "mathz" in bad.reason and VALID_DOMAINS in bad.reason
    assert rows["fine_env"].status == "ok"


def test_import_error_plugin_is_listed_broken_and_others_work(site: Path) -> None:
    env_dist(site, "importerror_env", extra="import ngym_no_such_module_anywhere  # noqa")
    env_dist(site, "fine_env")
    rows = rows_by_name(build_registry(make_plugin_manager()))
    assert rows["importerror_env"].status == "broken"
    assert "ngym_no_such_module_anywhere" in rows["importerror_env"].reason
    assert rows["importerror_env"].distribution == "dist-importerror-env"
    assert rows["fine_env"].status == "ok"
    assert rows["example_single_tool_call"].status == "ok"  # the built-ins go through the same path


def test_name_clash_names_both_distributions(site: Path) -> None:
    module = unique("clash")
    make_dist(
        site,
        "first-dist",
        {module: SERVER_MODULE.format(domain="Domain.AGENT", extra="", doc="x")},
        {"ngym.resources_servers": {"twin": f"{module}:Server"}},
    )
    make_dist(site, "second-dist", {}, {"ngym.resources_servers": {"twin": f"{module}:Server"}})
    registry = build_registry(make_plugin_manager())
    rows = [r for r in list_servers(registry) if r.name == "twin"]
    assert len(rows) == 2 and all(r.status == "broken" for r in rows)
    assert all("first-dist" in r.reason and "second-dist" in r.reason for r in rows)
    with pytest.raises(PluginError, match="first-dist.*second-dist"):
        registry.get("twin")


def test_broken_hook_plugin_is_reported_with_its_distribution(site: Path) -> None:
    make_dist(site, "broken-hooks", {unique("hooks"): "raise ImportError('missing dependency xyz')\n"}, {})
    module = unique("hooks")
    make_dist(
        site,
        "broken-hooks2",
        {module: "raise ImportError('missing dependency xyz')\n"},
        {"ngym": {"brokenhooks": module}},
    )
    pm = make_plugin_manager()
    problem = next(p for p in pm.problems if p.plugin == "brokenhooks")
    assert problem.distribution == "broken-hooks2" and "missing dependency xyz" in problem.reason
    rows = list_servers(build_registry(pm))
    assert any(r.kind == "hook_plugin" and r.name == "brokenhooks" and r.status == "broken" for r in rows)


def test_misspelt_hook_rejects_the_plugin() -> None:
    class Misspelt:
        @hookimpl
        def ngym_registr_commands(self, cli: click.Group) -> None: ...

    pm = make_plugin_manager(load_entry_points=False, plugins=[("misspelt", Misspelt())])
    assert not pm.has_plugin("misspelt")
    assert "ngym_registr_commands" in pm.problems[0].reason


def test_misspelt_hook_is_an_error_in_strict_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    class Misspelt:
        @hookimpl
        def ngym_registr_commands(self, cli: click.Group) -> None: ...

    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(PluginError, match="ngym_registr_commands"):
        make_plugin_manager(load_entry_points=False, plugins=[("misspelt", Misspelt())])


def test_strict_mode_makes_broken_environments_errors(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_dist(site, "mathz_env", domain='"mathz"')
    env_dist(site, "importerror_env", extra="import ngym_no_such_module_anywhere  # noqa")
    rows = list_servers(build_registry(make_plugin_manager()))
    check_strict(rows)  # lenient: no error
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(PluginError) as caught:
        check_strict(rows)
    assert "mathz_env" in str(caught.value) and "importerror_env" in str(caught.value)


def test_inspection_cache_avoids_imports_until_the_module_changes(site: Path, tmp_path: Path) -> None:
    marker = tmp_path / "imports.log"
    module = env_dist(site, "cached_env", extra=f"open({str(marker)!r}, 'a').write('x')")
    assert rows_by_name(build_registry(make_plugin_manager()))["cached_env"].status == "ok"
    assert marker.read_text() == "x"
    del sys.modules[module]
    assert rows_by_name(build_registry(make_plugin_manager()))["cached_env"].domain == "agent"
    assert marker.read_text() == "x"  # served from the cache: not imported again
    source = site / f"{module}.py"
    source.write_text(source.read_text().replace("Domain.AGENT", "Domain.GAMES"))
    assert rows_by_name(build_registry(make_plugin_manager()))["cached_env"].domain == "games"
    assert marker.read_text() == "xx"


# ---- the CLI --------------------------------------------------------------------------------------------------


def run_cli(*args: str) -> Any:
    from ngym.cli import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_ngym_list_json_and_table_show_broken_plugins(site: Path) -> None:
    env_dist(site, "mathz_env", domain='"mathz"')
    env_dist(site, "importerror_env", extra="import ngym_no_such_module_anywhere  # noqa")
    result = run_cli("list", "--json")
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["mathz_env"]["status"] == "broken" and rows["example_single_tool_call"]["status"] == "ok"
    reset_registry()
    table = run_cli("list").output
    assert "mathz_env" in table and "broken" in table and VALID_DOMAINS in table


def test_ngym_list_in_strict_mode_exits_non_zero(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_dist(site, "importerror_env", extra="import ngym_no_such_module_anywhere  # noqa")
    monkeypatch.setenv(STRICT_ENV, "1")
    from ngym.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["list"])
    assert exited.value.code == 1


def test_ngym_uninstall_works_with_a_broken_plugin_installed(site: Path, tmp_path: Path) -> None:
    env_dist(site, "importerror_env", extra="import ngym_no_such_module_anywhere  # noqa")
    hooks = unique("brokenhooks")  # a broken hook plugin too: those are the ones a plugin manager imports
    make_dist(site, "broken-hooks", {hooks: "raise ImportError('missing dependency xyz')\n"}, {"ngym": {hooks: hooks}})
    env = {"PYTHONPATH": str(site), "NGYM_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    for strict in ("0", "1"):
        done = subprocess.run(
            [sys.executable, "-m", "ngym.cli", "uninstall", "-y", "ngym-not-installed-anywhere"],
            env={**env, STRICT_ENV: strict},
            capture_output=True,
            text=True,
            timeout=120,
        )
        # pip alone would warn and exit 0; ngym says so and fails, without loading the broken plugins
        assert done.returncode == 2, done.stderr
        assert "'ngym-not-installed-anywhere' is neither an installed distribution" in done.stderr
        assert "importerror_env" in done.stderr and "Traceback" not in done.stderr
        # one line, as every other ngym error (not click's usage block: "Usage: ...", "Try ...", "Error: ...")
        assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
        assert done.stderr.startswith("ngym: error: "), done.stderr
    listed = subprocess.run(  # the same site is broken for the commands that do load plugins
        [sys.executable, "-m", "ngym.cli", "list"],
        env={**env, STRICT_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 1 and "missing dependency xyz" in listed.stderr, listed.stderr


def test_ngym_install_passes_editable_and_upgrade_to_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    from ngym.installer import PipRun

    calls: list[list[str]] = []
    monkeypatch.setattr("ngym.installer.run_pip", lambda args: calls.append(list(args)) or 0)
    monkeypatch.setattr(  # without -v, pip's output is captured (ngym install prints a summary)
        "ngym.installer.run_pip_captured", lambda args, on_step: calls.append(list(args)) or PipRun(0, [])
    )
    assert run_cli("install", "-e", "-U", "./a", "./b").exit_code == 0
    assert run_cli("uninstall", "-y", "click").exit_code == 0  # pip itself is not run: nothing is removed
    assert calls == [["install", "--upgrade", "-e", "./a", "-e", "./b"], ["uninstall", "--yes", "click"]]


def test_ngym_uninstall_takes_an_environment_name_for_its_distribution(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_dist(site, "named_env")
    calls: list[list[str]] = []
    monkeypatch.setattr("ngym.installer.run_pip", lambda args: calls.append(list(args)) or 0)
    assert run_cli("uninstall", "-y", "named_env", "dist-named-env").exit_code == 0
    assert calls == [["uninstall", "--yes", "dist-named-env"]]  # named twice, removed once


def test_ngym_list_hooks_json_shows_hooks_per_plugin() -> None:
    rows = json.loads(run_cli("list", "--hooks", "--json").output)
    builtin = next(r for r in rows if r["name"] == "ngym.plugins.entrypoints")
    assert builtin["hooks"] == ["ngym_register_resources_servers"] and builtin["distribution"] == "ngym"
    assert run_cli("plugins").exit_code != 0  # dropped: it repeated `ngym list --hooks`


# ---- every hook, through the code that calls it -------------------------------------------------------------


def test_hook_ngym_register_commands_adds_a_cli_command(monkeypatch: pytest.MonkeyPatch) -> None:
    class Commands:
        @hookimpl
        def ngym_register_commands(self, cli: click.Group) -> None:
            @cli.command()
            def hello() -> None:
                """Say hello."""
                click.echo("hello from a plugin")

            @cli.command(name="run")  # ngym's own commands cannot be replaced
            def hijack() -> None:
                click.echo("hijacked")

    pm = make_plugin_manager(load_entry_points=False, plugins=[("commands", Commands())])
    reset_registry()
    monkeypatch.setattr("ngym.plugins.manager.get_plugin_manager", lambda: pm)
    assert run_cli("hello").output == "hello from a plugin\n"
    assert "hello" in run_cli("--help").output
    assert "hijacked" not in run_cli("run", "--help").output
    assert hook_plugins(pm)[0]["hooks"] == ["ngym_register_commands"]


def test_hook_ngym_extend_app_adds_a_route(monkeypatch: pytest.MonkeyPatch) -> None:
    from ngym.testing import app_for_class

    class Extend:
        @hookimpl
        def ngym_extend_app(self, app: FastAPI, server: SimpleResourcesServer) -> None:
            app.get("/-/extra")(lambda: {"server": server.config.name})

    pm = make_plugin_manager(load_entry_points=False, plugins=[("extend", Extend())])
    monkeypatch.setattr("ngym.plugins.manager.get_plugin_manager", lambda: pm)
    app = app_for_class(Good, name="good")
    assert "/-/extra" in {getattr(r, "path", "") for r in app.routes}


async def test_hook_ngym_session_store_supplies_a_store(monkeypatch: pytest.MonkeyPatch) -> None:
    from ngym.server.sessions.store import MemorySessionStore
    from ngym.testing import RolloutClient, app_for_class, serve_in_process

    made: list[str] = []

    class Store:
        @hookimpl
        def ngym_session_store(self, url: str, server: SimpleResourcesServer) -> Any:
            if not url.startswith("test://"):
                return None
            made.append(url)
            return MemorySessionStore(ttl_seconds=server.config.session_ttl_seconds, max_sessions=5)

    pm = make_plugin_manager(load_entry_points=False, plugins=[("store", Store())])
    monkeypatch.setattr("ngym.plugins.manager.get_plugin_manager", lambda: pm)
    async with serve_in_process(app_for_class(Good, name="good", session_store="test://one")) as http:
        assert (await RolloutClient(http).post("/seed_session", {})).status_code == 200
    assert made == ["test://one"]


def test_hook_ngym_profile_scenario_is_consulted(monkeypatch: pytest.MonkeyPatch) -> None:
    class Custom:
        def run(self, session: Any, row: dict) -> None:
            return None

    scenario = Custom()

    class Profile:
        @hookimpl
        def ngym_profile_scenario(self, name: str) -> Any:
            return scenario if name == "good" else None

    pm = make_plugin_manager(load_entry_points=False, plugins=[("profile", Profile())])
    assert pm.hook.ngym_profile_scenario(name="good") is scenario
    assert pm.hook.ngym_profile_scenario(name="other") is None


def test_hook_ngym_register_resources_servers_entries_run_by_name(site: Path) -> None:
    """A server registered by a hook plugin (group ``ngym``) is served by name like an entry-point one."""
    module = unique("hookenv")
    make_dist(
        site,
        "hook-env-dist",
        {
            module: SERVER_MODULE.format(domain="Domain.GAMES", extra="", doc="From a hook.")
            + "\nfrom ngym import hookimpl\n\n@hookimpl\ndef ngym_register_resources_servers(register):\n"
            "    register.add(Server, name='hook_env')\n"
        },
        {"ngym": {"hookenv": module}},
    )
    from ngym.server.pipeline.provenance import distribution_of
    from ngym.targets import resolve

    entry = resolve("hook_env")
    assert (entry.distribution, entry.target) == ("hook-env-dist", f"{module}:Server")
    assert distribution_of(sys.modules[module].Server) == ("hook-env-dist", "1.0")


# ---- a domain declared as a plain string is served like a Domain member ----------------------------------


async def test_string_domain_registers_serves_and_reports_its_domain() -> None:
    """``domain = "agent"`` passes registration, so ``ngym run`` and ``/health`` must work with it too."""
    from ngym.server.pipeline.app import ServeSpec, build_app, build_server
    from ngym.testing import serve_in_process

    class StringDomain(Good):
        domain = "agent"  # type: ignore[assignment]

    assert (
        registry_with(registering(lambda r: r.add(StringDomain, name="string_domain"))).get("string_domain").domain
        is Domain.AGENT
    )
    server = build_server(ServeSpec(target="inline", name="string_domain", fields={}), cls=StringDomain)
    assert server.resolved_domain() is Domain.AGENT
    async with serve_in_process(build_app(server)) as http:
        health = await http.get("/health")
    assert health.status_code == 200 and health.json()["domain"] == "agent"


def test_serving_a_class_with_an_invalid_domain_is_one_config_error() -> None:
    from ngym.errors import ConfigError
    from ngym.server.pipeline.app import ServeSpec, build_server

    class Mathz(Good):
        domain = "mathz"  # type: ignore[assignment]

    with pytest.raises(ConfigError, match=f"invalid domain 'mathz': must be one of {VALID_DOMAINS}"):
        build_server(ServeSpec(target="inline", name="mathz_env", fields={}), cls=Mathz)


def test_serving_a_class_that_breaks_a_registration_rule_says_which() -> None:
    from ngym.server.pipeline.app import ServeSpec, build_server

    class NoVerify(SimpleResourcesServer):
        config: BaseResourcesServerConfig
        domain = Domain.AGENT

    class SyncVerify(Good):
        def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:  # type: ignore[override]
            return BaseVerifyResponse(**body.model_dump(), reward=1.0)

    with pytest.raises(PluginError, match="does not implement verify"):
        build_server(ServeSpec(target="inline", name="no_verify", fields={}), cls=NoVerify)
    with pytest.raises(PluginError, match="verify must be `async def`"):
        build_server(ServeSpec(target="inline", name="sync_verify", fields={}), cls=SyncVerify)
