"""One cache root: ``XDG_CACHE_HOME`` moves every machine-wide cache CI fills (``docs/development.md``), so a run
with it pointing at an empty folder is a run on a new machine."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ngym.config import cache_dir, cache_root
from ngym.fleet.isolation import venv_root

REPO = Path(__file__).resolve().parents[2]


def test_the_cache_root_follows_xdg_cache_home_and_ngym_cache_dir_moves_only_the_per_run_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ngym_nemo_gym.catalogue.wheel import wheel_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("NGYM_CACHE_DIR", str(tmp_path / "run"))
    for name in ("NGYM_FLEET_VENVS", "NGYM_NEMO_WHEEL_DIR"):
        monkeypatch.delenv(name, raising=False)
    assert cache_root() == tmp_path / "xdg" / "ngym"
    assert cache_dir() == tmp_path / "run"
    assert wheel_dir() == tmp_path / "xdg" / "ngym" / "nemo-wheel"
    assert venv_root() == tmp_path / "xdg" / "ngym" / "fleet-venvs"


def _stand_in_python(venv: Path) -> None:
    """A venv whose python answers every check (the scripts' fast path: found made, nothing installed)."""
    python = venv / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)


def test_the_cached_venv_scripts_look_under_xdg_cache_home(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    env = {k: v for k, v in os.environ.items() if k not in ("NGYM_NEMO_VENV", "NGYM_TRAINER_VENV")}
    env |= {"XDG_CACHE_HOME": str(xdg), "NGYM_TRAINER_PYTHON": sys.executable}
    nemo = xdg / "ngym" / "nemo-gym-0.7.0-py313"
    _stand_in_python(nemo)
    version = subprocess.run([sys.executable, "-c", "import sys; print(sys.version)"], capture_output=True).stdout
    key = hashlib.sha256((REPO / "tools" / "trainer-requirements.txt").read_bytes() + version).hexdigest()[:16]
    trainers = xdg / "ngym" / "trainers" / key
    _stand_in_python(trainers)
    (trainers / ".ngym-complete").touch()
    for script, venv in (("nemo_venv.sh", nemo), ("trainer_venv.sh", trainers)):
        command = ["bash", str(REPO / "tools" / script)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(venv)
