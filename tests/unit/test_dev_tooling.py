"""The developer tooling: ``make install`` reinstalls only on a changed pyproject, make's progress lines, and a
skipped test failing the run under ``CI=true``."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli_runs import ROOT

REPO = Path(__file__).resolve().parents[2]


def _fake_venv_python(folder: Path, calls: Path) -> None:
    """A stand-in venv python: records its arguments, prints like pip, fails when FAIL_PIP is set."""
    python = folder / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\necho "pip noise"\n'
        # PIP_UNTIL: a slow pip, still running until that file exists (the test makes it once it saw progress)
        'n=0; while [ -n "$PIP_UNTIL" ] && [ ! -e "$PIP_UNTIL" ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done\n'
        'if [ -n "$FAIL_PIP" ]; then echo "ERROR: no such package"; exit 3; fi\n'
    )
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    ngym = python.parent / "ngym"
    ngym.write_text("#!/bin/sh\necho 'ngym, version 0'\n")
    ngym.chmod(0o755)


def slow_make_install(folder: Path) -> str:
    """``make install`` whose pip runs until make printed its first progress line (then it is let go)."""
    release = folder / "pip-may-finish"
    command = ["make", "install", "PROGRESS_SECONDS=1"]
    env = {**os.environ, "PIP_UNTIL": str(release)}
    with subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, text=True, env=env) as make:
        assert make.stdout is not None
        lines = []
        for line in make.stdout:
            lines.append(line)
            if line.startswith("make:   … ") and line.rstrip().endswith(": pip noise"):
                release.touch()
        assert make.wait(timeout=60) == 0, "".join(lines)
    return "".join(lines)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_install_reinstalls_only_when_a_pyproject_changed(tmp_path: Path) -> None:
    shutil.copy(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("")
    pkg = tmp_path / "resources_servers" / "a"
    pkg.mkdir(parents=True)
    (pkg / "pyproject.toml").write_text("")
    calls = tmp_path / "calls.log"
    _fake_venv_python(tmp_path, calls)

    def make_install(**env: str) -> str:
        return subprocess.run(
            ["make", "install", "PROGRESS_SECONDS=1"], cwd=tmp_path, capture_output=True, text=True, check=True,
            env={**os.environ, **env},
        ).stdout  # fmt: skip

    first = make_install()
    assert "pip noise" not in first and "installing ngym + 1 packages" in first  # pip's output went to the log
    assert "pip noise" in (tmp_path / ".venv" / "install.log").read_text()
    installs = calls.read_text().count("-e .[dev]")
    make_install()
    assert calls.read_text().count("-e .[dev]") == installs  # nothing changed: no reinstall
    future = time.time() + 5
    os.utime(pkg / "pyproject.toml", (future, future))
    slow = slow_make_install(tmp_path)  # a slow pip: progress lines, pip's latest line in them
    assert calls.read_text().count("-e .[dev]") == installs + 1
    assert re.search(r"^make:   … \d+s: pip noise$", slow, re.M)  # elapsed time and pip's latest line
    os.utime(pkg / "pyproject.toml", (future + 5, future + 5))
    failed = subprocess.run(["make", "install"], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "FAIL_PIP": "1"})  # fmt: skip
    assert failed.returncode != 0 and "ERROR: no such package" in failed.stdout
    assert "pip failed (exit 3)" in failed.stdout


def test_under_ci_a_skipped_test_fails_the_run(tmp_path: Path) -> None:
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\ndef test_runs():\n    pass\n\ndef test_skips():\n    pytest.skip('needs a thing')\n"
    )

    def pytest_run(ci: str) -> subprocess.CompletedProcess[str]:
        # No plugin autoloading: the conftest's hook is under test, not hypothesis' or schemathesis' (~1.5 s of
        # imports per run)
        env = {**os.environ, "CI": ci, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)]
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    local, ci = pytest_run(""), pytest_run("true")
    assert local.returncode == 0 and "SKIPPED [1]" in local.stdout and "needs a thing" in local.stdout
    assert ci.returncode == 1 and "CI=true: 1 test(s) skipped" in ci.stdout


def test_make_progress_lines_double_their_interval(tmp_path: Path) -> None:
    """Over a 7 s step at a 1 s interval: lines at 1 s and 3 s (was one a second: 6 or 7 lines)."""
    done = subprocess.run(
        ["make", "-s", "-f", str(ROOT / "Makefile"), "--eval", "probe: ; @$(call quietly,sleep 7)", "probe",
         "PROGRESS_SECONDS=1", f"LOG={tmp_path / 'log'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ticks = [line for line in done.stdout.splitlines() if line.startswith("make:   …")]
    assert 1 <= len(ticks) <= 3, done.stdout
