"""``ngym run NAME`` from the serve snapshot: used while nothing changed, never once something did.

Fake distributions (real ``*.dist-info`` folders on ``sys.path``, from test_plugins) stand in for installs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ngym.cli.run import build_specs
from ngym.errors import EnvironmentNotFound
from ngym.plugins import snapshot
from ngym.plugins.manager import STRICT_ENV
from ngym.plugins.registry import reset_registry
from tests.unit.test_plugins import env_dist, lenient, make_dist, site, unique

# test_plugins' fixtures: ``lenient`` (autouse: not strict, a private cache, a fresh registry) and ``site``.
__all__ = ["lenient", "site"]

CONFIG = """\
{env}:
  resources_servers:
    {env}:
      entrypoint: app.py
      domain: agent
      description: {description}
"""


def forbid_plugin_system(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if anything resolves through the registry or loads hook plugins (the snapshot must answer)."""

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the plugin system was consulted although the snapshot is valid")

    monkeypatch.setattr("ngym.plugins.discovery.find_environment", forbidden)
    monkeypatch.setattr("ngym.plugins.manager.get_plugin_manager", forbidden)


def installed_env(site: Path, description: str = "first") -> str:
    env = unique("snap_env")
    env_dist(site, env)
    (site / "configs").mkdir(exist_ok=True)
    (site / "configs" / f"{env}.yaml").write_text(CONFIG.format(env=env, description=description))
    return env


def serve_spec(env: str, *overrides: str):  # -> ServeSpec
    (spec,) = build_specs((env, *overrides), None, None)
    reset_registry()  # the next resolution starts as a new ``ngym run`` process would
    return spec


def test_second_run_is_served_from_the_snapshot_with_the_same_spec(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = installed_env(site)
    first = serve_spec(env)
    assert snapshot.lookup(env) is not None
    with monkeypatch.context() as patched:
        forbid_plugin_system(patched)
        second = serve_spec(env)
    assert (second.target, second.fields) == (first.target, first.fields)
    assert first.fields["description"] == "first"
    assert second.app_plugins is False, "no installed plugin implements ngym_extend_app"


def test_plain_overrides_apply_on_top_of_snapshot_fields(site: Path) -> None:
    env = installed_env(site)
    serve_spec(env)
    spec = serve_spec(env, "description=overridden", "port=9123")
    assert spec.fields["description"] == "overridden" and spec.fields["port"] == 9123
    assert serve_spec(env).fields["description"] == "first", "an override is never remembered"


def test_an_install_or_uninstall_invalidates_the_snapshot(site: Path) -> None:
    env = installed_env(site)
    serve_spec(env)
    make_dist(site, unique("other-dist").replace("_", "-"), {}, {})
    assert snapshot.lookup(env) is None
    serve_spec(env)
    assert snapshot.lookup(env) is not None


def test_an_edited_entry_points_file_invalidates_the_snapshot(site: Path) -> None:
    env = installed_env(site)
    serve_spec(env)
    (entry_points,) = site.glob("*.dist-info/entry_points.txt")
    entry_points.write_text(entry_points.read_text() + "\n# reinstalled\n")
    assert snapshot.lookup(env) is None


def test_an_uninstalled_environment_is_not_found_despite_the_snapshot(site: Path) -> None:
    env = installed_env(site)
    serve_spec(env)
    for info in site.glob("*.dist-info"):
        for file in info.iterdir():
            file.unlink()
        info.rmdir()
    with pytest.raises(EnvironmentNotFound):
        serve_spec(env)


def test_an_edited_config_is_read_again(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = installed_env(site)
    serve_spec(env)
    (site / "configs" / f"{env}.yaml").write_text(CONFIG.format(env=env, description="second, longer"))
    with monkeypatch.context() as patched:
        forbid_plugin_system(patched)  # still the snapshot: only the YAML is parsed again
        assert serve_spec(env).fields["description"] == "second, longer"
    assert snapshot.lookup(env).fields["description"] == "second, longer"  # type: ignore[union-attr]


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
    assert serve_spec(env).app_plugins is True  # from the snapshot, which knows the plugin


def test_an_edited_hook_plugin_invalidates_the_snapshot(site: Path) -> None:
    env = installed_env(site)
    module = unique("hooks")
    make_dist(site, module.replace("_", "-"), {module: "X = 1\n"}, {"ngym": {module: module}})
    serve_spec(env)
    assert snapshot.lookup(env) is not None
    (site / f"{module}.py").write_text("X = 2  # edited in an editable install\n")
    assert snapshot.lookup(env) is None


def test_a_broken_plugin_is_reported_every_time_not_remembered(site: Path) -> None:
    env = installed_env(site)
    module = unique("broken")
    make_dist(site, module.replace("_", "-"), {module: "raise ImportError('missing dependency')\n"},
              {"ngym": {module: module}})
    serve_spec(env)
    assert snapshot.lookup(env) is None


# ---- ngym list from its snapshot --------------------------------------------------------------------------


def list_json() -> list[dict]:
    import json

    from click.testing import CliRunner

    from ngym.cli import cli

    result = CliRunner().invoke(cli, ["list", "--json"], catch_exceptions=False)
    reset_registry()
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def forbid_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the registry was built although the listing snapshot is valid")

    monkeypatch.setattr("ngym.plugins.registry.get_registry", forbidden)


def test_a_second_listing_comes_from_the_snapshot(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = installed_env(site)
    first = list_json()
    assert any(row["name"] == env and row["domain"] == "agent" for row in first)
    with monkeypatch.context() as patched:
        forbid_registry(patched)
        assert list_json() == first


def test_an_edited_environment_module_or_install_is_listed_afresh(site: Path) -> None:
    env = installed_env(site)
    list_json()
    (module,) = [p for p in site.glob("envmod_*.py")]
    module.write_text(module.read_text().replace('"""A test env."""', '"""Edited description."""'))
    assert snapshot.cached_listing() is None
    sys.modules.pop(module.stem, None)  # a new ``ngym list`` process would import the edited code
    assert {r["name"]: r["description"] for r in list_json()}[env] == "Edited description."
    other = unique("listed_env")
    env_dist(site, other)
    assert other in {r["name"] for r in list_json()}


def test_a_listing_with_a_broken_plugin_is_not_remembered(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed_env(site)
    broken = unique("broken_env")
    env_dist(site, broken, domain='"mathz"')
    assert {r["name"]: r["status"] for r in list_json()}[broken] == "broken"
    assert snapshot.cached_listing() is None
    monkeypatch.setenv(STRICT_ENV, "1")
    from click.testing import CliRunner

    from ngym.cli import cli

    assert CliRunner().invoke(cli, ["list"]).exit_code != 0, "strict mode still sees the broken plugin"


def test_a_damaged_snapshot_is_ignored_not_a_crash(site: Path) -> None:
    env = installed_env(site)
    first = serve_spec(env)
    list_json()
    cache = Path(os.environ["NGYM_CACHE_DIR"])
    for file_name, damage in (
        (snapshot.SNAPSHOT_FILE, lambda d: d["environments"][env].update(target=None, fields="x")),
        (snapshot.LISTING_FILE, lambda d: d["rows"][0].pop("name")),
    ):
        data = json.loads((cache / file_name).read_text())
        damage(data)
        (cache / file_name).write_text(json.dumps(data))
    assert snapshot.lookup(env) is None and snapshot.cached_listing() is None
    assert serve_spec(env).target == first.target
    assert env in {row["name"] for row in list_json()}
    (cache / snapshot.SNAPSHOT_FILE).write_text("{not json")
    assert serve_spec(env).target == first.target


def test_refresh_resolves_through_the_registry_and_renews_the_snapshot(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = installed_env(site)
    serve_spec(env)
    resolved: list[str] = []
    import ngym.plugins.discovery as discovery

    real = discovery.find_environment
    monkeypatch.setattr(discovery, "find_environment", lambda n: resolved.append(n) or real(n))
    (spec,) = build_specs((env,), None, None, refresh=True)
    assert resolved == [env] and spec.fields["description"] == "first"
    assert snapshot.lookup(env) is not None
