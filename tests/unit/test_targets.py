"""``ngym.targets``: one answer to "what is this target?" for every command, hook-registered environments included.

Fake distributions (real ``*.dist-info`` folders on ``sys.path``, from test_plugins) stand in for installs. The
behaviours the removed serve/list snapshots were tested for (an edited config or module is seen, an uninstalled
environment is gone, a broken plugin is reported every time) are asserted here against the resolver and the one
remaining cache.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ngym.cli import cli
from ngym.cli.run import build_specs
from ngym.containerize.spec import resolve_plugin
from ngym.domain import Domain
from ngym.errors import ConfigError, EnvironmentNotFound
from ngym.plugins.manager import BUILTIN_PLUGINS
from ngym.plugins.registry import get_registry, reset_registry
from ngym.targets import is_url, resolve
from tests.unit.test_plugins import SERVER_MODULE, env_dist, lenient, make_dist, site, unique

# test_plugins' fixtures: ``lenient`` (autouse: not strict, a private cache, a fresh registry) and ``site``.
__all__ = ["lenient", "site"]

REPO = Path(__file__).resolve().parents[2]
WEATHER = REPO / "resources_servers" / "example_single_tool_call"

CONFIG = """\
{env}:
  resources_servers:
    {env}:
      entrypoint: app.py
      domain: agent
      description: {description}
"""


def installed_env(site: Path, description: str = "first") -> str:
    env = unique("tenv")
    env_dist(site, env)
    (site / "configs").mkdir(exist_ok=True)
    (site / "configs" / f"{env}.yaml").write_text(CONFIG.format(env=env, description=description))
    return env


def hook_env(site: Path) -> tuple[str, str]:
    """A distribution whose hook plugin registers environment ``hook_<x>`` (no resources_servers entry point)."""
    env, module = unique("hook"), unique("hookmod")
    make_dist(
        site,
        f"dist-{env}".replace("_", "-"),
        {
            module: SERVER_MODULE.format(domain="Domain.GAMES", extra="", doc="From a hook.")
            + "\nfrom ngym import hookimpl\n\n@hookimpl\ndef ngym_register_resources_servers(register):\n"
            f"    register.add(Server, name={env!r})\n"
        },
        {"ngym": {env: module}},
    )
    return env, module


def serve_spec(env: str, *overrides: str):  # -> ServeSpec
    (spec,) = build_specs((env, *overrides), None, None)
    reset_registry()  # the next resolution starts as a new ``ngym run`` process would
    return spec


# ---- one target, every spelling ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "example_single_tool_call",
        str(WEATHER),
        str(WEATHER / "configs" / "example_single_tool_call.yaml"),
    ],
)
def test_a_name_a_folder_and_a_config_resolve_to_the_same_environment(target: str) -> None:
    environment = resolve(target)
    assert environment.name == "example_single_tool_call"
    assert environment.folder == WEATHER
    assert environment.fields["description"].startswith("A single get_weather tool")
    assert environment.domain is Domain.AGENT
    assert environment.server_class.__name__ == "WeatherResourcesServer"


def test_an_app_file_and_a_module_target_resolve() -> None:
    by_file = resolve(str(WEATHER / "app.py"))
    assert (by_file.name, by_file.folder, by_file.fields) == ("example_single_tool_call", WEATHER, {})
    by_module = resolve("example_single_tool_call.app:WeatherResourcesServer")
    assert (by_module.name, by_module.folder) == ("WeatherResourcesServer", WEATHER)
    assert by_file.domain is by_module.domain is Domain.AGENT


def test_a_url_an_unknown_name_and_a_non_environment_folder_are_clear_errors(tmp_path: Path) -> None:
    assert is_url("http://127.0.0.1:8000") and not is_url("example_single_tool_call")
    with pytest.raises(ConfigError, match="running server's URL"):
        resolve("http://127.0.0.1:8000")
    with pytest.raises(EnvironmentNotFound, match="installed: .*example_single_tool_call"):
        resolve("no_such_environment")
    with pytest.raises(ConfigError, match="not an environment folder"):
        resolve(str(tmp_path))


def test_a_folder_with_a_pyproject_names_its_distribution() -> None:
    environment = resolve(str(WEATHER))
    assert (environment.distribution, environment.version) == ("ngym-example-single-tool-call", "0.1.0")


# ---- installed names: entry points and hook plugins alike ----------------------------------------------------


def test_a_hook_registered_environment_resolves_serves_and_containerizes(site: Path) -> None:
    env, module = hook_env(site)
    environment = resolve(env)
    assert (environment.target, environment.distribution) == (f"{module}:Server", f"dist-{env}".replace("_", "-"))
    assert environment.domain is Domain.GAMES
    assert serve_spec(env).target == f"{module}:Server"
    plugin = resolve_plugin(env)  # containerize used to read raw entry points and could not find it
    assert (plugin.name, plugin.domain, plugin.distribution) == (env, "games", f"dist-{env}".replace("_", "-"))


def test_a_hook_registered_environment_has_the_folder_it_was_registered_with(site: Path, tmp_path: Path) -> None:
    """A plugin serving many environments from one module (verifiers', OpenEnv's) gives each its own folder,
    where every command finds its examples; without one, the module's folder (the old rule) still holds."""
    env, module = unique("hookf"), unique("hookfmod")
    own = tmp_path / "own"
    (own / "data").mkdir(parents=True)
    (own / "data" / "example.jsonl").write_text("{}\n")
    make_dist(
        site,
        f"dist-{env}".replace("_", "-"),
        {
            module: SERVER_MODULE.format(domain="Domain.GAMES", extra="", doc="From a hook.")
            + "\nfrom ngym import hookimpl\n\n@hookimpl\ndef ngym_register_resources_servers(register):\n"
            f"    register.add(Server, name={env!r}, folder={str(own)!r})\n"
            f"    register.add('{module}:Server', name={env + '_plain'!r})\n"
        },
        {"ngym": {env: module}},
    )
    assert resolve(env).folder == own
    assert resolve(env).data_file("example.jsonl") == own / "data" / "example.jsonl"
    assert resolve(env + "_plain").folder == site


def without_hook_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in an image with no hook plugin installed (this test venv has some)."""
    real = __import__("ngym.targets", fromlist=["installed_entry_points"]).installed_entry_points
    hide = lambda group: [] if group == "ngym" else real(group)  # noqa: E731
    monkeypatch.setattr("ngym.targets.installed_entry_points", hide)
    monkeypatch.setattr("ngym.plugins.manager.installed_entry_points", hide)
    reset_registry()


def test_without_hook_plugins_a_name_is_read_from_its_entry_point_alone(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ngym run NAME`` then loads no hook plugin: the registry holds the entry points alone (and the app is
    served without app plugins)."""
    env = installed_env(site)
    without_hook_plugins(monkeypatch)
    spec = serve_spec(env)
    assert spec.fields["description"] == "first" and spec.app_plugins is False
    builtins = {module.__name__ for module in BUILTIN_PLUGINS}
    assert {name for name, _plugin in get_registry().pm.list_name_plugin()} == builtins


def test_a_name_breaking_a_registration_rule_is_refused_with_or_without_hook_plugins(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry is the one way to resolve a name: an entry point it refuses (no ``:Class``) is not an
    environment to serve because no hook plugin happens to be installed."""
    env, module = unique("tenv"), unique("envmod")
    make_dist(site, f"dist-{env}".replace("_", "-"), {module: "X = 1\n"}, {"ngym.resources_servers": {env: module}})
    with pytest.raises(EnvironmentNotFound):
        resolve(env)
    without_hook_plugins(monkeypatch)
    with pytest.raises(EnvironmentNotFound):
        resolve(env)
    (problem,) = [p for p in get_registry().problems if p.plugin == env]
    assert "module:Class" in problem.reason


def test_plain_overrides_apply_on_top_of_config_fields(site: Path) -> None:
    env = installed_env(site)
    assert serve_spec(env, "description=over").fields["description"] == "over"
    assert serve_spec(env, f"{env}.resources_servers.{env}.description=tree").fields["description"] == "tree"


def test_an_edited_config_is_read_again(site: Path) -> None:
    env = installed_env(site)
    assert serve_spec(env).fields["description"] == "first"
    (site / "configs" / f"{env}.yaml").write_text(CONFIG.format(env=env, description="second, longer"))
    assert serve_spec(env).fields["description"] == "second, longer"


def test_an_uninstalled_environment_is_not_found(site: Path) -> None:
    env = installed_env(site)
    serve_spec(env)
    for info in site.glob("*.dist-info"):
        for file in info.iterdir():
            file.unlink()
        info.rmdir()
    with pytest.raises(EnvironmentNotFound):
        serve_spec(env)


def test_a_plugin_that_extends_apps_keeps_the_plugin_hooks_on(site: Path) -> None:
    env = installed_env(site)
    module = unique("extender")
    make_dist(
        site,
        module.replace("_", "-"),
        {module: "from ngym import hookimpl\n\n@hookimpl\ndef ngym_extend_app(app, server):\n    pass\n"},
        {"ngym": {module: module}},
    )
    assert serve_spec(env).app_plugins is True


# ---- ngym list and its one cache -----------------------------------------------------------------------------


def list_json() -> list[dict]:
    result = CliRunner().invoke(cli, ["list", "--json"], catch_exceptions=False)
    reset_registry()
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_an_edited_environment_module_or_install_is_listed_afresh(site: Path) -> None:
    env = installed_env(site)
    assert {r["name"]: r["description"] for r in list_json()}[env] == "A test env."
    (module,) = [p for p in site.glob("envmod_*.py")]
    module.write_text(module.read_text().replace('"""A test env."""', '"""Edited description."""'))
    sys.modules.pop(module.stem, None)  # a new ``ngym list`` process would import the edited code
    assert {r["name"]: r["description"] for r in list_json()}[env] == "Edited description."
    other = unique("listed_env")
    env_dist(site, other)
    assert other in {r["name"] for r in list_json()}


def test_a_broken_plugin_is_reported_every_time(site: Path) -> None:
    installed_env(site)
    broken = unique("broken_env")
    env_dist(site, broken, domain='"mathz"')
    for _ in range(2):
        row = {r["name"]: r for r in list_json()}[broken]
        assert row["status"] == "broken" and "invalid domain 'mathz'" in row["reason"]


def test_a_file_and_class_target_is_the_file_even_when_it_looks_like_a_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``app.py:Class`` (also a valid ``module:Class`` spelling) names the file app.py: it never resolves as an
    installed name, and a missing file is a clear error, not "no environment named"."""
    from ngym.targets import is_path_shaped

    weather = Path(__file__).resolve().parents[2] / "resources_servers" / "example_single_tool_call" / "app.py"
    (tmp_path / "app.py").write_text(weather.read_text())
    monkeypatch.chdir(tmp_path)
    assert is_path_shaped("app.py:WeatherResourcesServer") and not is_path_shaped("ngym_pkg.module:Server")
    environment = resolve("app.py:WeatherResourcesServer")
    assert environment.target == f"{tmp_path / 'app.py'}:WeatherResourcesServer"
    with pytest.raises(ConfigError, match="no such file or folder"):
        resolve("missing.py:WeatherResourcesServer")
