"""Fleet engines come from one registry (``ngym.fleet.engines``): ngym's four and every plugin's, through the
``ngym_register_fleet_engines`` hook. A fleet file's ``engine:`` is checked against it when the file is read."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ngym import hookimpl
from ngym.cli import main
from ngym.errors import ConfigError, PluginError
from ngym.fleet.engines import FleetEngines, engine, registered
from ngym.fleet.spec import FleetSpec, load_fleet
from ngym.plugins.manager import make_plugin_manager

#: an engine that hands the fleet to another system: ``ngym up`` prints its lines
handing_engine = SimpleNamespace(
    hand_off=lambda spec: [f"handed {spec.name} over: {', '.join(spec.environments)}"],
    runner=lambda spec: "the plugin's scheduler",
)


class EnginePlugin:
    @hookimpl
    def ngym_register_fleet_engines(self, register: FleetEngines) -> None:
        register.add("handing", f"{__name__}:handing_engine")


@pytest.fixture
def plugin_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    pm = make_plugin_manager(load_entry_points=False, plugins=[("engine_plugin", EnginePlugin())])
    monkeypatch.setattr("ngym.plugins.manager.get_plugin_manager", lambda: pm)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_a_plugins_engine_is_registered_read_from_a_fleet_file_and_run_by_ngym_up(
    plugin_engine: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert registered().names() == ["local", "compose", "ray", "kubernetes", "handing"]
    spec = load_fleet(write(tmp_path, "engine: handing\nenvironments: {weather: example_single_tool_call}\n"))
    assert spec.engine == "handing" and engine("handing") is handing_engine
    with pytest.raises(SystemExit) as done:
        main(["up", str(tmp_path / "fleet.yaml")])
    assert done.value.code in (0, None)
    assert "handed fleet over: weather" in capsys.readouterr().out


def test_an_unknown_engine_is_one_error_listing_the_registered_ones(
    plugin_engine: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_fleet(write(tmp_path, "engine: handin\nenvironments: {a: x}\n"))
    assert str(caught.value) == (
        f"{tmp_path / 'fleet.yaml'}: engine: no fleet engine 'handin'; did you mean 'handing'?"
        " (engines: local, compose, ray, kubernetes, handing)"
    )
    with pytest.raises(SystemExit) as done:
        main(["up", str(tmp_path / "fleet.yaml")])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "no fleet engine 'handin'" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_the_builtin_engines_are_the_modules_that_run_them() -> None:
    from ngym.fleet import kubernetes, local, ray_engine

    assert engine("local") is local and engine("ray") is ray_engine and engine("kubernetes") is kubernetes
    assert FleetSpec(name="x", environments={"a": {"env": "x"}}).engine == "local"


@pytest.mark.parametrize(("name", "loader"), [("local", "ngym.fleet.local"), ("", "x"), ("x", "module:")])
def test_a_bad_registration_is_a_plugin_error(name: str, loader: Any) -> None:
    engines = registered()
    with pytest.raises(PluginError):
        engines.add(name, loader)
