"""In-process serving (`ngym validate`, `ngym.testing.replay_examples`) runs inside the folder a target's module
names, as `ngym run` does, and returns to the caller's folder after."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ngym.server.pipeline.app import in_working_directory, working_directory


def test_a_module_target_runs_in_its_folder_and_returns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "env_home"
    home.mkdir()
    (tmp_path / "wd_shim_module.py").write_text(f"NGYM_WORKING_DIRECTORY = {str(home)!r}\nclass Server: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    try:
        assert working_directory("wd_shim_module:Server") == str(home)  # imported to ask
        with in_working_directory("wd_shim_module:Server"):
            assert Path.cwd() == home
        assert Path.cwd() == tmp_path
        with pytest.raises(RuntimeError), in_working_directory("wd_shim_module:Server"):
            raise RuntimeError("the app failed")
        assert Path.cwd() == tmp_path  # restored on failure too
    finally:
        sys.modules.pop("wd_shim_module", None)


def test_targets_without_a_folder_stay_where_they_are(tmp_path: Path) -> None:
    before = os.getcwd()
    for target in (str(tmp_path / "app.py"), "no_such_module_anywhere:Server", "json:JSONDecoder"):
        assert working_directory(target) is None
        with in_working_directory(target):
            assert os.getcwd() == before
