"""A reinstall removes the older venvs of its name (an edited folder gets a new venv), never another name's and
never one a running process uses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ngym_openenv import install as install_module
from ngym_openenv.manifest import Manifest
from ngym_openenv.venv_prune import prune_replaced


def venv_dirs(root: Path, *names: str) -> list[Path]:
    for name in names:
        (root / name / "bin").mkdir(parents=True)
    return [root / name for name in names]


def test_an_install_removes_its_names_older_venvs_only(tmp_path: Path) -> None:
    old, new, other, longer, not_a_venv = venv_dirs(
        tmp_path, "echo-aaaaaaaaaaaa", "echo-bbbbbbbbbbbb", "chess-cccccccccccc", "echo_env-dddddddddddd", "echo-x"
    )
    said: list[str] = []
    removed = prune_replaced(tmp_path, "echo", new, said.append)
    assert removed == [old]
    assert not old.exists()
    assert all(path.exists() for path in (new, other, longer, not_a_venv))
    assert said and "echo-aaaaaaaaaaaa" in said[-1]


def test_a_venv_a_running_process_uses_is_kept(tmp_path: Path) -> None:
    old, new = venv_dirs(tmp_path, "maze-aaaaaaaaaaaa", "maze-bbbbbbbbbbbb")
    # A process started from the older venv (as `ngym run` starts the replaced install's server from it).
    script = old / "bin" / "serve.py"
    script.write_text("import time; print('up', flush=True); time.sleep(60)\n")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"up\n"  # running, not still starting (or already gone)
        said: list[str] = []
        assert prune_replaced(tmp_path, "maze", new, said.append) == []
        assert old.exists() and "keeping" in said[0]
    finally:
        process.kill()
        process.wait()
    assert prune_replaced(tmp_path, "maze", new, said.append) == [old]


def test_install_prunes_after_the_new_install_only_for_venvs_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "openenv-venvs"
    old, new = venv_dirs(root, "grid-aaaaaaaaaaaa", "grid-bbbbbbbbbbbb")
    monkeypatch.setattr(install_module, "venv_root", lambda: root)
    manifest = Manifest(name="grid", source="x", domain="games", python=str(new / "bin" / "python"), app="a:app")
    install_module._prune_older_venvs(manifest, lambda _line: None)
    assert not old.exists() and new.exists()

    elsewhere = tmp_path / "own" / "bin" / "python"  # -o python=: not ngym's venv, nothing of ngym's removed
    old2, _ = venv_dirs(root, "grid-cccccccccccc", "grid-dddddddddddd")
    manifest = Manifest(name="grid", source="x", domain="games", python=str(elsewhere), app="a:app")
    install_module._prune_older_venvs(manifest, lambda _line: None)
    assert old2.exists()
