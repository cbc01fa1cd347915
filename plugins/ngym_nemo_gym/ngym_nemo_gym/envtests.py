"""Run a NeMo Gym environment's own tests the way NeMo Gym's ``gym env test`` runs them, on ngym.

The environment folder is copied into a scratch root as ``<root>/resources_servers/<name>`` (NeMo Gym's repository
layout, so ``from resources_servers.<name>.app import ...`` resolves), and pytest runs from inside that folder
(so ``from app import ...`` resolves) with pytest-asyncio in auto mode. The source folder is never written to.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from ngym.plugin_api import environment_test_command

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".venv")


@dataclass
class EnvTestResult:
    """Counts of one environment's test run; ``output`` is pytest's own (tail kept)."""

    name: str
    returncode: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    output: str = ""
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.failed == 0 and self.errors == 0 and self.passed > 0


_SHARED_ROOT_FOLDERS = (
    "benchmarks",
    "environment_servers",
    "environments",
    "responses_api_agents",
    "responses_api_models",
)
_SIBLING_IMPORT = re.compile(r"\bresources_servers\.(\w+)")


def referenced_environments(folder: Path) -> set[str]:
    """Names of the other environments ``folder``'s code imports (``from resources_servers.gymnasium import ...``)."""
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        try:
            names.update(_SIBLING_IMPORT.findall(path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    names.discard(folder.name)
    return names


def stage_environment(source: Path, root: Path) -> Path:
    """Copy environment folder ``source`` to ``root/resources_servers/<name>``, with the sibling environments it
    imports (found next to it, transitively), as NeMo Gym's repository holds them; return the copy."""
    pending, staged = [source], set()
    while pending:
        folder = pending.pop()
        if folder.name in staged:
            continue
        staged.add(folder.name)
        shutil.copytree(folder, root / "resources_servers" / folder.name, ignore=_IGNORED, symlinks=True)
        siblings = (source.parent / name for name in referenced_environments(folder))
        pending.extend(sibling for sibling in siblings if sibling.is_dir() and sibling.name not in staged)
    # What some environments' code and tests read from NeMo Gym's repository root besides resources_servers/
    # (benchmark configs and modules, its agents): linked read-only when the source tree has them, not copied.
    for shared in _SHARED_ROOT_FOLDERS:
        target = source.parent.parent / shared
        if target.is_dir() and not (root / shared).exists():
            (root / shared).symlink_to(target, target_is_directory=True)
    return root / "resources_servers" / source.name


def pytest_command(python: str, junit_xml: Path, extra: list[str] | None = None) -> list[str]:
    """``gym env test``'s command (ngym's one definition), quiet, with a JUnit report for the counts."""
    options = ["-q", "-o", "asyncio_default_fixture_loop_scope=function", f"--junitxml={junit_xml}", *(extra or [])]
    return environment_test_command(options, python=python)


def run_environment_tests(
    source: Path,
    *,
    python: str = sys.executable,
    timeout: float = 600,
    extra_args: list[str] | None = None,
) -> EnvTestResult:
    """Run the tests of NeMo Gym environment folder ``source`` in a scratch copy; never raises on test failures."""
    source = Path(source).absolute()
    with tempfile.TemporaryDirectory(prefix=f"ngym-envtest-{source.name}-") as scratch:
        root = Path(scratch)
        folder = stage_environment(source, root)
        junit = root / "junit.xml"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root), str(folder), os.environ.get("PYTHONPATH")])),
            "NGYM_NEMO_ROOT": str(root),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        try:
            completed = subprocess.run(
                pytest_command(python, junit, extra_args),
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return EnvTestResult(source.name, -1, output=f"timed out after {timeout:.0f}s\n{output[-4000:]}")
        result = EnvTestResult(source.name, completed.returncode, output=(completed.stdout + completed.stderr)[-20000:])
        if junit.exists():
            _read_junit(junit, result)
        return result


def _read_junit(path: Path, result: EnvTestResult) -> None:
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        if outcome is None:
            result.passed += 1
        elif outcome.tag == "skipped":
            result.skipped += 1
        else:
            if outcome.tag == "failure":
                result.failed += 1
            else:
                result.errors += 1
            message = (outcome.get("message") or "").strip().splitlines()
            result.failures.append(f"{test_id}: {message[0][:300] if message else outcome.tag}")
