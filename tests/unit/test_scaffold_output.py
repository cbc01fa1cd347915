"""What ``ngym init`` writes and the authoring docs show: the scaffold's README, the columns ``ngym list`` prints,
and an invalid domain named with its config file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngym.errors import ConfigError


def test_authoring_shows_the_columns_ngym_list_prints() -> None:
    """docs/authoring.md showed distribution and version columns a usual terminal does not print."""
    from ngym.cli.list import _render
    from ngym.listing import ServerInfo

    doc = (Path(__file__).resolve().parents[2] / "docs" / "authoring.md").read_text()
    shown = next(line for line in doc.splitlines() if line.startswith("ngym list  "))
    columns = next(line for line in doc.splitlines() if "(columns " in line)
    long = "A description as long as the built-ins' own, which wraps under its column on an 80-column terminal."
    rows = [
        ServerInfo(name=n, domain="agent", distribution=f"ngym-{n}", version="0.1.0", status="ok",
                   description=d, reason=None, target=n)
        for n, d in (("my_tool", "Look things up with one tool."), ("example_session_state_mgmt", long))
    ]  # fmt: skip
    header, first = _render(rows, width=80).splitlines()[:2]
    assert header.split() == ["NAME", "DOMAIN", "STATUS", "DESCRIPTION"]
    assert " ".join(header.split()) in columns and "DISTRIBUTION" in columns
    assert shown.split("#", 1)[1].split()[:3] == first.split()[:3] == ["my_tool", "agent", "ok"]


def test_scaffold_readme_ends_the_description_before_the_next_sentence(tmp_path: Path) -> None:
    from ngym.scaffold import scaffold

    folder = scaffold("guess_number", "games", tmp_path, description="Guess a number with higher/lower hints")
    readme = (folder / "README.md").read_text()
    assert "Guess a number with higher/lower hints.\n\nAn [ngym]" in readme


def test_an_invalid_domain_names_the_config_file_it_came_from(tmp_path: Path) -> None:
    from ngym.cli.run import build_specs
    from ngym.scaffold import scaffold
    from ngym.validation import validate

    folder = scaffold("guess_number", "games", tmp_path)
    config = folder / "configs" / "guess_number.yaml"
    config.write_text(config.read_text().replace("domain: games", "domain: gamez"))
    with pytest.raises(ConfigError) as raised:
        build_specs((str(config),), None, None)
    assert str(raised.value).startswith(f"{config}: guess_number: invalid domain 'gamez'")
    report = validate(str(config))
    assert str(config) in report.checks[0].detail and not report.ok
