"""Reading ``verifiers:<what>`` (no venv is made here), the CLI's dispatch and its errors."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngym_verifiers.install import (
    VerifiersInstallError,
    domain_of,
    inline_requirements,
    parse_source,
)

from ngym.cli import cli as main

FIXTURES = Path(__file__).with_name("fixtures")


def test_a_vf_init_folder_is_its_project_and_package() -> None:
    source = parse_source(f"verifiers:{FIXTURES / 'vf_notes'}")
    assert (source.kind, source.distribution, source.name) == ("folder", "vf-notes", "vf_notes")
    assert source.requirements == [str((FIXTURES / "vf_notes").resolve())]


def test_a_module_file_brings_its_pep_723_requirements() -> None:
    source = parse_source(f"verifiers:{FIXTURES / 'vf_ledger.py'}")
    assert (source.kind, source.module, source.requirements) == ("module", "vf_ledger", ["verifiers==0.3.1"])
    assert inline_requirements("import verifiers\n") == []


def test_a_name_is_a_distribution_on_the_index() -> None:
    source = parse_source("verifiers:catapult-verifiers==0.1.0")
    assert (source.kind, source.distribution) == ("distribution", "catapult-verifiers")
    assert source.name == "catapult_verifiers"
    assert source.requirements == ["catapult-verifiers==0.1.0"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("verifiers:", "give what to install"), ("verifiers:./no/such/dir", "no such folder"),
     ("verifiers:/tmp/none.py", "no such module file"), ("verifiers:$$$", "not a distribution name")],
)  # fmt: skip
def test_bad_sources_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(VerifiersInstallError, match=message):
        parse_source(text)


def test_a_folder_without_pyproject_is_refused(tmp_path: Path) -> None:
    with pytest.raises(VerifiersInstallError, match="pyproject.toml"):
        parse_source(f"verifiers:{tmp_path}")


def test_domain_from_flag_else_first_keyword_that_is_one() -> None:
    assert domain_of("math", ["agent"]).value == "math"  # type: ignore[union-attr]
    assert domain_of(None, ["rl", "Agent"]).value == "agent"  # type: ignore[union-attr]
    assert domain_of(None, ["rl", "eval"]) is None


def test_cli_dispatches_verifiers_sources_and_fails_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "ngym.cli", "install", "verifiers:"], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ngym: error: give what to install: verifiers:<folder>, verifiers:<module.py> or verifiers:<distribution>"
        " (ngym list --available verifiers)"
    ]


def test_domain_is_only_for_adapted_sources() -> None:
    result = CliRunner().invoke(main, ["install", "--domain", "math", "some-package"])
    assert result.exit_code == 2
    assert "--as, --domain, --option and --replace apply to PREFIX:SOURCE installs" in result.output


def test_list_available_verifiers_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NGYM_OFFLINE", "1")
    monkeypatch.setenv("NGYM_VERIFIERS_RECORDS", str(tmp_path))
    result = CliRunner().invoke(main, ["list", "--available", "verifiers"])
    assert result.exit_code == 0, result.output
    assert re.search(r"^catapult-verifiers +games ", result.output, re.MULTILINE)
    assert "not checked" in result.output
    assert "install one: ngym install verifiers:NAME" in result.output


def test_a_distribution_may_name_the_module_that_serves_it() -> None:
    source = parse_source("verifiers:staros-stardata[env]:stardata.envs.constraint_gym")
    assert (source.kind, source.distribution, source.requirements) == (
        "distribution", "staros-stardata", ["staros-stardata[env]"],
    )  # fmt: skip
    assert (source.module, source.name) == ("stardata.envs.constraint_gym", "constraint_gym")
    url = parse_source("verifiers:my-env @ https://example.org/my_env-1.0-py3-none-any.whl")
    assert url.module is None and url.requirements == ["my-env @ https://example.org/my_env-1.0-py3-none-any.whl"]


def test_an_unclear_module_says_how_to_name_it() -> None:
    from ngym_verifiers.install import choose_module

    with pytest.raises(VerifiersInstallError, match="verifiers:catapult-verifiers:MODULE"):
        choose_module(["catapult_verifiers_core", "game_eval"], "catapult-verifiers")


def test_old_api_code_on_verifiers_0_4_says_how_to_pin_it() -> None:
    from ngym_verifiers.install import legacy_api_hint

    source = parse_source("verifiers:sophistry-bench-sprint")
    error = "loading sophistry_bench_sprint: AttributeError: module 'verifiers' has no attribute 'Rubric'"
    hint = legacy_api_hint(error, "0.4.0", source)
    assert "verifiers <= 0.3 API, which verifiers 0.4.0" in hint
    assert '"sophistry-bench-sprint", "verifiers==0.3.1"' in hint
    assert "from sophistry_bench_sprint import load_environment" in hint
    assert legacy_api_hint(error, "0.3.1", source) == ""  # not the 0.4 removal: no such advice
    assert legacy_api_hint("ValueError: FACADE_URL or base_url is required", "0.4.0", source) == ""


@pytest.mark.parametrize("fixture", ["vf_ledger.py", "vf_typed.py"])
def test_a_module_without_domain_is_refused_before_any_venv_work(
    fixture: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module names no domain: say so at once, not after minutes of making its venv."""
    from ngym_verifiers import install, venvs

    monkeypatch.setenv("NGYM_VERIFIERS_RECORDS", str(tmp_path))

    def no_venv(*args: object, **kwargs: object) -> None:
        raise AssertionError("a venv was made before the domain was known")

    monkeypatch.setattr(venvs, "venv_for", no_venv)
    with pytest.raises(VerifiersInstallError, match="declares no domain.*--domain"):
        install.install_source(f"verifiers:{FIXTURES / fixture}", echo=lambda line: None)


def test_a_folder_without_a_domain_keyword_is_refused_before_any_venv_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from ngym_verifiers import install, venvs

    folder = tmp_path / "vf_plain"
    shutil.copytree(FIXTURES / "vf_notes", folder)
    project = folder / "pyproject.toml"
    text = project.read_text()
    project.write_text(text.replace('keywords = ["agent"', 'keywords = ["nothing-known"').replace('"agent"', '"x"'))
    monkeypatch.setenv("NGYM_VERIFIERS_RECORDS", str(tmp_path / "records"))
    monkeypatch.setattr(venvs, "venv_for", lambda *a, **k: (_ for _ in ()).throw(AssertionError("venv made")))
    with pytest.raises(VerifiersInstallError, match="declares no domain"):
        install.install_source(f"verifiers:{folder}", echo=lambda line: None)
