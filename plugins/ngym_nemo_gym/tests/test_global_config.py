"""NeMo Gym's config composition: config_paths merged in order, a file that is not a mapping named."""

from __future__ import annotations

from pathlib import Path

import pytest
from nemo_gym.global_config import GlobalConfigDictParser, GlobalConfigDictParserConfig
from omegaconf import OmegaConf


def _parse(initial: dict[str, object]) -> dict[object, object]:
    config = GlobalConfigDictParserConfig(initial_global_config_dict=OmegaConf.create(initial))
    merged = OmegaConf.to_container(GlobalConfigDictParser().parse(config))
    assert isinstance(merged, dict)
    return merged


def test_config_paths_merge_in_order_under_the_initial_dict(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("a: 1\nb: 1\n")
    (tmp_path / "top.yaml").write_text(f"config_paths: [{tmp_path / 'base.yaml'}]\nb: 2\nc: 2\n")
    merged = _parse({"config_paths": [str(tmp_path / "top.yaml")], "c": 3})
    assert {key: merged[key] for key in "abc"} == {"a": 1, "b": 2, "c": 3}


def test_a_config_file_holding_a_list_is_refused_by_name(tmp_path: Path) -> None:
    listed = tmp_path / "listed.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="listed.yaml: a NeMo Gym config file holds a mapping, not a ListConfig"):
        _parse({"config_paths": [str(listed)]})
