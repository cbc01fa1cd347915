"""Dotted overrides on the command line: a full path sets a value, a path that addresses nothing is an error naming
the full path it probably meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngym.config_tree import load_tree
from ngym.errors import ConfigError

JUDGE_YAML = """\
my_env:
  resources_servers:
    my_env:
      entrypoint: app.py
      domain: math
      judge_model_server:
        type: responses_api_models
        name: ???
"""


@pytest.fixture
def judge_config(tmp_path: Path) -> Path:
    path = tmp_path / "my_env.yaml"
    path.write_text(JUDGE_YAML)
    return path


def test_a_dotted_override_by_its_full_path_sets_the_value(judge_config: Path) -> None:
    tree = load_tree([judge_config], ["my_env.resources_servers.my_env.judge_model_server.name=judge"]).plain()
    assert tree["my_env"]["resources_servers"]["my_env"]["judge_model_server"]["name"] == "judge"


def test_a_dotted_override_without_its_prefix_names_the_full_path(judge_config: Path) -> None:
    """Was accepted silently: a new top-level branch nothing reads, and judge calls went to the policy model."""
    with pytest.raises(ConfigError) as raised:
        load_tree([judge_config], ["judge_model_server.name=judge"])
    assert "'judge_model_server.name' addresses nothing" in str(raised.value)
    assert "did you mean 'my_env.resources_servers.my_env.judge_model_server.name'" in str(raised.value)


def test_a_dotted_override_of_nothing_is_an_error(judge_config: Path) -> None:
    with pytest.raises(ConfigError, match="'foo.bar' addresses nothing in the config"):
        load_tree([judge_config], ["foo.bar=1"])


def test_a_dotted_override_may_add_a_field_to_an_instance(judge_config: Path) -> None:
    """A config field the YAML leaves to its default is still settable by its full path."""
    tree = load_tree([judge_config], ["my_env.resources_servers.my_env.port=9000"]).plain()
    assert tree["my_env"]["resources_servers"]["my_env"]["port"] == 9000


def test_cli_run_with_an_override_of_nothing_exits_2(judge_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ngym.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["run", str(judge_config), "judge_model_server.name=judge"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "my_env.resources_servers.my_env.judge_model_server.name" in err and "Traceback" not in err
