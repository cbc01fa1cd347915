"""The install-source contract: ``ngym install PREFIX:WHAT`` goes to the plugin that registered PREFIX, and the core
names no ecosystem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ngym import NgymError, PluginError, hookimpl
from ngym.cli import cli
from ngym.plugins.manager import make_plugin_manager
from ngym.plugins.sources import InstallSource, InstallSources, collect_install_sources

NGYM = Path(__file__).resolve().parents[2] / "ngym"


def sources_of(*plugins: tuple[str, Any]) -> InstallSources:
    pm = make_plugin_manager(load_entry_points=False, plugins=plugins, builtins=False)
    return collect_install_sources(pm.hook.ngym_register_install_sources, lambda impl: impl.plugin_name)


class Recorder:
    """A fake ecosystem: records installs and uninstalls."""

    def __init__(self, prefix: str, claims: str | None = None) -> None:
        self.prefix = prefix
        self.installed: list[tuple[str, dict[str, Any]]] = []
        self.removed: list[str] = []
        self._claims = claims

    def source(self) -> InstallSource:
        def install(text: str, **options: Any) -> None:
            self.installed.append((text, options))

        def uninstall(names: list[str], *, yes: bool, echo: Any) -> list[str]:
            mine = [n for n in names if n.startswith(f"{self.prefix}:")]
            self.removed.extend(mine)
            return mine

        return InstallSource(
            prefix=self.prefix,
            install=install,
            available=lambda: [{"name": "one", "domain": "games", "version": "1.0", "description": "the first"}],
            uninstall=uninstall,
            claims=(lambda text: text == self._claims) if self._claims else None,
            description="a fake catalogue",
        )

    @hookimpl
    def ngym_register_install_sources(self, register: InstallSources) -> None:
        register.add(self.source())


def test_a_registered_prefix_is_found_and_claims_are_asked() -> None:
    fake = Recorder("fake", claims="./a-fake-folder")
    sources = sources_of(("fake", fake))
    assert sources.prefixes() == ["fake"]
    assert sources.for_source("fake:thing") is sources.get("fake")
    assert sources.for_source("./a-fake-folder") is sources.get("fake")
    assert sources.for_source("some-package") is None
    assert sources.for_source("other:thing") is None  # not a prefix anyone registered


def test_a_prefix_two_plugins_register_names_both() -> None:
    with pytest.raises(PluginError, match="'fake' is registered by both one and two"):
        sources_of(("one", Recorder("fake")), ("two", Recorder("fake")))


def test_an_unknown_prefix_is_one_line_naming_the_installed_sources() -> None:
    sources = sources_of(("fake", Recorder("fake")))
    with pytest.raises(NgymError, match=r"fakr: no installed plugin installs 'fakr:'.*did you mean 'fake'.*ngym-fakr"):
        sources.named("fakr")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder("fake")
    sources = sources_of(("fake", recorder))
    monkeypatch.setattr("ngym.cli.install.install_sources", lambda: sources)
    monkeypatch.setattr("ngym.cli.list.install_sources", lambda: sources)
    return recorder


def test_install_dispatches_to_the_source_with_its_options(fake: Recorder) -> None:
    result = CliRunner().invoke(cli, ["install", "fake:one", "--domain", "games", "-o", "k=v", "--as", "x"])
    assert result.exit_code == 0, result.output
    assert fake.installed == [
        (
            "fake:one",
            {
                "as_name": "x",
                "domain": "games",
                "options": {"k": "v"},
                "replace": False,
                "verbose": False,
                "echo": fake.installed[0][1]["echo"],
            },
        )
    ]


def test_install_of_an_unknown_prefix_is_one_line(fake: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    from ngym.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["install", "fakr:one"])
    err = capsys.readouterr().err
    assert exited.value.code not in (0, None) and "no installed plugin installs 'fakr:'" in err
    assert "Traceback" not in err and fake.installed == []


def test_uninstall_offers_names_to_the_sources_first(fake: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    pip: list[list[str]] = []
    monkeypatch.setattr("ngym.installer.run_pip", lambda args: pip.append(list(args)) or 0)
    result = CliRunner().invoke(cli, ["uninstall", "-y", "fake:one", "click"])
    assert result.exit_code == 0, result.output
    assert fake.removed == ["fake:one"] and pip == [["uninstall", "--yes", "click"]]


def test_list_available_asks_the_source(fake: Recorder) -> None:
    result = CliRunner().invoke(cli, ["list", "--available", "fake"])
    assert result.exit_code == 0, result.output
    assert "one   games   1.0" in result.output and "install one: ngym install fake:NAME" in result.output
    assert "fake:  a fake catalogue" in CliRunner().invoke(cli, ["list", "--available", "?"]).output


def test_the_installed_ecosystem_plugins_each_register_their_prefix() -> None:
    from ngym.plugins.sources import install_sources

    assert {"nemo-gym", "openenv", "ors", "verifiers"} <= set(install_sources().prefixes())


def test_the_core_names_no_ecosystem_plugin() -> None:
    """Adding a fourth ecosystem must not touch ngym/: no module of the core imports an ecosystem plugin."""
    offenders = [
        str(path.relative_to(NGYM))
        for path in NGYM.rglob("*.py")
        for line in path.read_text().splitlines()
        if line.lstrip().startswith(("import ngym_", "from ngym_"))
    ]
    assert offenders == []
