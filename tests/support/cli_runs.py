"""Running the ``ngym`` command as a user does, and a fresh ``ngym init`` environment to run it on."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from ngym.scaffold import scaffold

ROOT = Path(__file__).resolve().parents[2]
NGYM = str(Path(sys.executable).parent / "ngym")


def run_ngym(
    *args: str, cwd: Path, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``ngym ARGS`` in ``cwd`` as a subprocess (``NGYM_DEBUG`` unset, so errors are the one-line kind)."""
    environ = {**os.environ, **(env or {})}
    environ.pop("NGYM_DEBUG", None)
    return subprocess.run([NGYM, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environ)


def fresh_environment(tmp_path: Path, verify_reward: str | None = None) -> Path:
    """A fresh ``ngym init`` environment; ``verify_reward``: an expression its verify returns instead."""
    folder = scaffold(f"tool_{uuid.uuid4().hex[:8]}", parent=tmp_path)
    if verify_reward is not None:
        app = folder / "app.py"
        source = app.read_text()
        marker = "            reward=1.0 if correct else 0.0,"
        assert marker in source
        app.write_text(source.replace(marker, f"            reward={verify_reward},"))
    return folder
