"""``ngym list --available verifiers`` shows what the docs report, installs as it says, and says when it is offline."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngym_verifiers import catalog
from ngym_verifiers.install import parse_source

from ngym.cli import cli as main

DOCS = Path(__file__).resolve().parents[3] / "docs" / "coming-from-verifiers.md"


def docs_distribution_rows() -> dict[str, str]:
    """The docs' table of verifiers distributions on the package index: distribution -> its result cell."""
    text = DOCS.read_text(encoding="utf-8")
    table = text.split("**Distributions on the package index** (found by", 1)[1].split("\n\n", 2)[1]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        for name in re.findall(r"`([a-z0-9-]+)(?:\[[a-z]+\])?` \d", cells[0]):
            rows[name] = cells[-1]
    return rows


def test_the_list_is_the_docs_table_of_what_installs() -> None:
    """Every distribution the docs report served is listed; every listed one is in the docs' table; none the docs
    call a library or not a verifiers environment is listed."""
    documented = docs_distribution_rows()
    assert documented, "the docs' table of distributions was not found"
    served = {name for name, result in documented.items() if "**served**" in result}
    not_environments = {name for name, result in documented.items() if "library" in result or "not tried" in result}
    assert served and served <= set(catalog.KNOWN)
    assert set(catalog.KNOWN) <= set(documented)
    assert not set(catalog.KNOWN) & not_environments


def test_a_listed_name_installs_as_the_list_says() -> None:
    """A bare name from the list gets the verifiers release its code was written for, its extra and its module;
    a requirement the user wrote is taken as written."""
    source = parse_source("verifiers:sophistry-bench-sprint")
    assert source.requirements == ["sophistry-bench-sprint", "verifiers==0.3.1"]
    source = parse_source("verifiers:staros-stardata")
    assert source.requirements[:2] == ["staros-stardata[env]", "verifiers==0.3.1"]
    assert (source.module, source.name) == ("stardata.envs.constraint_gym", "constraint_gym")
    assert parse_source("verifiers:sophistry-bench-sprint==0.1.6").requirements == ["sophistry-bench-sprint==0.1.6"]


def test_offline_the_list_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NGYM_OFFLINE", "1")
    result = CliRunner().invoke(main, ["list", "--available", "verifiers"])
    assert result.exit_code == 0, result.output
    assert "sophistry-bench-sprint" in result.output
    assert result.output.strip().splitlines()[-1].startswith("verifiers: NGYM_OFFLINE=1: the package index was not")


def test_an_unreachable_index_is_said_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NGYM_OFFLINE", raising=False)
    monkeypatch.setattr(catalog, "latest_version", lambda name: catalog.UNREACHABLE)  # no network in this test
    result = CliRunner().invoke(main, ["list", "--available", "verifiers"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1].startswith("verifiers: the package index cannot be reached")


def test_a_release_for_another_python_says_it_does_not_install_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NGYM_OFFLINE", raising=False)
    monkeypatch.setattr(catalog, "latest_version", lambda name: catalog.NO_RELEASE if "koan" in name else "1.0")
    rows = {row["name"]: row for row in catalog.available()}
    assert "not installable here: no release for Python" in rows["koan-verifiers"]["description"]
    assert rows["hud-vf-gym"]["version"] == "1.0" and not catalog.available().note
