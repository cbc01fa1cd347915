"""``ngym run`` plans a start once: the YAML tree is merged once and passed on (issue 23, item 3).

The served environments' fields and the global config the servers receive (``NGYM_NEMO_GLOBAL_CONFIG``) come
from the same loaded tree; counting the merges (``ngym.config_tree``'s file walk, which every load does first)
shows the files are not merged again for the global config or the top-level values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ngym.config_tree as config_tree
from ngym.cli.run import build_specs
from ngym.run_carriers import GLOBAL_CONFIG_ENV
from ngym.server.pipeline.app import ServeSpec, build_server

REPO = Path(__file__).resolve().parents[2]
WEATHER_CONFIG = REPO / "resources_servers" / "example_single_tool_call" / "configs" / "example_single_tool_call.yaml"

CONFIG = """\
judge_base_url: http://127.0.0.1:1
plan_env:
  resources_servers:
    plan_env:
      entrypoint: {app}
      domain: agent
      judge_url: ${{judge_base_url}}
"""


@pytest.fixture
def merges(monkeypatch: pytest.MonkeyPatch) -> list[list[Path]]:
    """Every merge of config files ``load_tree`` does, as the files it was given."""
    calls: list[list[Path]] = []
    walk = config_tree._files_in_merge_order

    def counted(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
        calls.append(list(paths))
        return walk(paths)

    monkeypatch.setattr(config_tree, "_files_in_merge_order", counted)
    monkeypatch.delenv(GLOBAL_CONFIG_ENV, raising=False)
    return calls


def _global_config() -> dict[str, Any]:
    import os

    loaded: dict[str, Any] = json.loads(os.environ[GLOBAL_CONFIG_ENV])
    return loaded


def _specs(*targets: str) -> list[ServeSpec]:
    return build_specs(targets, None, None)


def test_a_config_file_is_merged_once(merges: list[list[Path]], tmp_path: Path) -> None:
    config = tmp_path / "plan.yaml"
    config.write_text(CONFIG.format(app=REPO / "resources_servers" / "example_single_tool_call" / "app.py"))
    (spec,) = _specs(str(config), "plan_env.resources_servers.plan_env.judge_url=http://127.0.0.1:2")
    assert spec.fields["judge_url"] == "http://127.0.0.1:2"
    assert len(merges) == 1, merges
    served = _global_config()["plan_env"]["resources_servers"]["plan_env"]
    assert served["judge_url"] == "http://127.0.0.1:2"  # the override reached the global config too


def test_a_plain_top_level_value_still_reaches_the_fields(merges: list[list[Path]], tmp_path: Path) -> None:
    config = tmp_path / "plan.yaml"
    config.write_text(CONFIG.format(app=REPO / "resources_servers" / "example_single_tool_call" / "app.py"))
    (spec,) = _specs(str(config), "judge_base_url=http://127.0.0.1:3")
    assert spec.fields["judge_url"] == "http://127.0.0.1:3"
    assert _global_config()["judge_base_url"] == "http://127.0.0.1:3"
    assert len(merges) == 2, merges  # the plan, and the plan again with the value it sets


def test_an_installed_name_is_merged_once(merges: list[list[Path]]) -> None:
    (spec,) = _specs("example_single_tool_call")
    assert spec.name == "example_single_tool_call"
    assert [[p.resolve() for p in paths] for paths in merges] == [[WEATHER_CONFIG.resolve()]]
    assert "example_single_tool_call" in _global_config()


def test_a_class_imported_while_planning_is_served_without_importing_it_again(
    merges: list[list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain override is checked against the config class (the class is imported then); serving in this
    process builds the server from that class, and the spec's JSON (for a child process) leaves it out."""
    (spec,) = _specs("example_single_tool_call", "description=planned once")
    assert spec.server_class is not None

    def imported_again(target: str) -> None:
        raise AssertionError(f"{target} imported again")

    monkeypatch.setattr("ngym.server.pipeline.app.load_server_class", imported_again)
    server = build_server(spec)
    assert type(server) is spec.server_class and server.config.description == "planned once"
    carried = json.loads(spec.to_json())
    assert "server_class" not in carried and carried["fields"]["description"] == "planned once"
    assert ServeSpec.from_json(spec.to_json()) == spec  # the class is not part of what the spec is
