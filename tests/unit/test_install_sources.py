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
    with pytest.raises(NgymError, match=r"fakr: no installed plugin installs 'fakr:'.*did you mean 'fake'") as typo:
        sources.named("fakr")
    # a typo is not sent to the package index for a plugin named after it
    assert "pip install" not in str(typo.value)
    with pytest.raises(NgymError, match=r"mycatalogue: no installed plugin.*pip install ngym-mycatalogue"):
        sources.named("mycatalogue")


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


# ---- InstallSource.lazy: an ecosystem's wrapper in a few lines ------------------------------------------------------


@pytest.fixture
def lazy_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """A module ``lazy_catalogue_impl`` on sys.path whose functions record their calls (in ``CALLS``)."""
    (tmp_path / "lazy_catalogue_impl.py").write_text(
        "CALLS = []\n"
        "def install(source, **flags):\n    CALLS.append((source, flags))\n    return 'installed'\n"
        "def available():\n    return [{'name': 'one'}]\n"
        "def claims(text):\n    return text.endswith('/mine')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import sys

    sys.modules.pop("lazy_catalogue_impl", None)
    yield []
    sys.modules.pop("lazy_catalogue_impl", None)


def test_a_lazy_source_imports_its_module_only_when_a_function_runs(lazy_catalogue: list[Any]) -> None:
    import sys

    source = InstallSource.lazy(
        "lazy", "lazy_catalogue_impl:install", available="lazy_catalogue_impl:available",
        claims="lazy_catalogue_impl:claims", description="a lazy catalogue",
    )  # fmt: skip
    assert "lazy_catalogue_impl" not in sys.modules and source.uninstall is None
    assert source.claims is not None and source.claims("./x/mine") and not source.claims("./x/other")
    assert source.available is not None and source.available() == [{"name": "one"}]
    echo = print
    done = source.install(
        "lazy:one", as_name="x", domain="games", options={"k": "v"}, replace=False, verbose=True, echo=echo
    )
    assert done == "installed"
    calls = sys.modules["lazy_catalogue_impl"].CALLS
    assert calls == [
        ("lazy:one", {"as_name": "x", "verbose": True, "echo": echo, "domain": "games", "options": {"k": "v"}})
    ]


def test_a_lazy_source_refuses_the_flags_it_does_not_read_in_one_line(lazy_catalogue: list[Any]) -> None:
    import sys

    reads_domain = InstallSource.lazy("lazy", "lazy_catalogue_impl:install")
    with pytest.raises(NgymError) as refused:
        reads_domain.install("lazy:one", as_name=None, domain=None, options={}, replace=True, verbose=False, echo=print)
    assert str(refused.value) == "--replace does not apply to lazy: environments; uninstall the other environment first"
    reads_replace = InstallSource.lazy("lazy", "lazy_catalogue_impl:install", reads=("replace",))
    with pytest.raises(NgymError) as refused:
        reads_replace.install(
            "lazy:one", as_name=None, domain="games", options={"k": "v"}, replace=False, verbose=False, echo=print
        )
    assert str(refused.value) == "--domain and --option do not apply to lazy: environments"
    assert "lazy_catalogue_impl" not in sys.modules  # refused before anything was imported
    reads_replace.install("lazy:one", as_name=None, domain=None, options={}, replace=True, verbose=False, echo=print)
    assert sys.modules["lazy_catalogue_impl"].CALLS[0][1]["replace"] is True


def test_a_lazy_source_with_a_misnamed_function_or_flag_is_a_plugin_error() -> None:
    with pytest.raises(PluginError, match="name a function as 'module:name'"):
        InstallSource.lazy("lazy", "lazy_catalogue_impl.install")
    with pytest.raises(PluginError, match="reads \\['domains'\\]"):
        InstallSource.lazy("lazy", "m:f", reads=("domains",))
