"""A ``--workers N`` supervisor killed outright (SIGKILL: a fleet unit whose Ray actor or node died) leaves its
HAProxy folder in the temporary directory; the next supervisor to start removes every such folder of this user
whose supervisor is gone, and keeps those of supervisors still running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ngym.server.hosting.affinity import FOLDER_PREFIX, sweep_stale_folders


def test_folders_of_supervisors_that_are_gone_are_removed(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)  # that process has exited
    dead = tmp_path / f"{FOLDER_PREFIX}{dead_pid}-abc123"
    live = tmp_path / f"{FOLDER_PREFIX}{os.getpid()}-def456"
    unnamed = tmp_path / f"{FOLDER_PREFIX}ghi789"  # no supervisor named: whose it is cannot be told
    for folder in (dead, live, unnamed):
        folder.mkdir()
        (folder / "haproxy.cfg").write_text("global\n")
    assert sweep_stale_folders(tmp_path) == [dead]
    assert not dead.exists() and live.is_dir() and unnamed.is_dir()
