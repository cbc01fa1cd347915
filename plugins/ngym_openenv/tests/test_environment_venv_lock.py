"""Two installs of the same OpenEnv requirements at once (two fleet units, two terminals): one makes the venv,
the other waits for it and reuses it, instead of deleting it half made."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest
from ngym_openenv import environment_venv as module


def test_the_venv_is_made_under_a_lock_another_install_waits_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "venv_root", lambda: tmp_path)
    inside, release = threading.Event(), threading.Event()

    def made(where: Path, requirements: list[str], echo: object) -> str:
        inside.set()
        assert release.wait(timeout=60)
        return str(where / "bin" / "python")

    monkeypatch.setattr(module, "_made_venv", made)
    maker = threading.Thread(target=module.environment_venv, args=("env", ["openenv-core==0.10.0"], None, print))
    maker.start()
    try:
        assert inside.wait(timeout=60)
        [lock] = tmp_path.glob("env-*.lock")
        with open(lock, "a") as other, pytest.raises(BlockingIOError):  # a second install would wait here
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        release.set()
        maker.join(timeout=60)
    with open(lock, "a") as other:  # released once the venv is made
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
