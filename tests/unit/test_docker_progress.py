"""``make test`` runs the Docker tests (minutes each) quietly: each says when it starts."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_each_docker_test_says_when_it_starts() -> None:
    probe = ROOT / "tests" / "docker" / f"test_zz_progress_probe_{uuid.uuid4().hex[:8]}.py"
    probe.write_text("def test_probe() -> None:\n    pass\n")
    try:
        # Only the plugin the repository's settings name (asyncio): the hook under test is tests/docker's conftest,
        # not hypothesis' or schemathesis' (~1.5 s of imports when autoloaded)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_asyncio.plugin", str(probe)],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        )  # fmt: skip
    finally:
        probe.unlink()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"] tests/docker/{probe.name}::test_probe …" in done.stderr, done.stdout + done.stderr
