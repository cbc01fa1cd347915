"""An environment's own tests, run the way NeMo Gym's ``gym env test`` runs them: the one owner of that.

That is: pytest started from inside the environment's folder, pytest-asyncio in auto mode, and on
``PYTHONPATH`` the folder itself (``from app import ...``) and the folder holding ``resources_servers/``
(``from resources_servers.<name>.app import ...``). Two ways to run them, one definition of each step:

- **in place** (``ngym test <name|folder>``, ``run_tests``): an installed environment is tested where pip put
  it; a folder outside a ``resources_servers/`` tree is reached through a temporary ``resources_servers/<name>``
  link.
- **in a scratch copy** (``run_environment_tests``; the compat plugin and
  ``tools/nemo_envs.py``): ``stage_environment`` lays the folder out as NeMo Gym's repository holds it, the source
  is never written to, and the counts come from pytest's JUnit report (``read_junit``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from ngym.errors import ConfigError, EnvironmentNotFound, NgymError
from ngym.suggest import did_you_mean
from ngym.targets import installed, installed_names, is_path_shaped

#: What NeMo Gym's repository configures for every environment's tests (its pyproject's pytest section).
PYTEST_OPTIONS = ("-o", "asyncio_mode=auto", "-p", "no:cacheprovider")


class TestToolsMissing(NgymError):
    """pytest or pytest-asyncio is not installed in ngym's environment."""

    __test__ = False  # not a pytest test class, whatever its name


@dataclass(frozen=True)
class TestTarget:
    """Where an environment's tests run: its folder, and the folder that holds ``resources_servers/``."""

    __test__ = False

    name: str
    folder: Path
    project_root: Path | None  # None: a temporary link tree is made for the run


def locate(target: str) -> TestTarget:
    """A folder path, an installed environment's name, or an installed NeMo Gym module ``resources_servers.<name>``."""
    path = Path(target).expanduser()
    if path.is_dir():
        folder = path.resolve()
        root = folder.parent.parent if folder.parent.name == "resources_servers" else None
        return TestTarget(folder.name, folder, root)
    if is_path_shaped(target):  # a path never means the installed environment of that name
        raise ConfigError(f"{target}: no such folder ({path.absolute()})")
    folder = _installed_folder(target)
    root = folder.parent.parent if folder.parent.name == "resources_servers" else None
    return TestTarget(target, folder, root)


def _installed_folder(name: str) -> Path:
    names = installed_names()
    if name in names:
        folder = installed(name).folder
        if folder is not None:
            return folder
    try:  # a NeMo Gym environment installed without a server of its own (a base other environments import)
        spec = importlib.util.find_spec(f"resources_servers.{name}") if name.isidentifier() else None
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    known = ", ".join(names) or "none installed"
    raise EnvironmentNotFound(
        f"no environment or folder named {name!r}{did_you_mean(name, names)} (installed: {known})"
    )


def pytest_command(extra_args: Sequence[str] = (), *, python: str = sys.executable) -> list[str]:
    """The command ``gym env test`` runs an environment's tests with (from inside its folder): pytest under
    ``python`` (default: this interpreter) with NeMo Gym's options, then ``extra_args``. The one definition:
    ``ngym test``, the compat plugin's ``run_environment_tests`` (``ngym.plugin_api.environment_test_command``)
    and ``tools/nemo_envs.py`` all run this."""
    return [python, "-m", "pytest", *PYTEST_OPTIONS, *extra_args]


def test_environ(folder: Path, root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment pytest runs in: ``base`` (default: this process's) with the environment's ``folder`` and
    the ``root`` holding ``resources_servers/`` first on ``PYTHONPATH``, ahead of ``base``'s own."""
    base = os.environ if base is None else base
    path = os.pathsep.join(p for p in (str(folder), str(root), base.get("PYTHONPATH", "")) if p)
    return {**base, "PYTHONPATH": path}


def check_test_tools() -> None:
    missing = [m for m in ("pytest", "pytest_asyncio") if importlib.util.find_spec(m) is None]
    if missing:
        names = " ".join(m.replace("_", "-") for m in missing)
        raise TestToolsMissing(f"{names} not installed in ngym's environment: pip install {names}")


def run_tests(target: str, extra_args: Sequence[str] = ()) -> int:
    """Run the environment's tests; pytest's exit code (its output goes to this process's stdout)."""
    check_test_tools()
    located = locate(target)
    with ExitStack() as stack:
        root = located.project_root
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ngym-test-")))
            (root / "resources_servers").mkdir()
            (root / "resources_servers" / located.folder.name).symlink_to(located.folder, target_is_directory=True)
        return subprocess.call(pytest_command(extra_args), cwd=located.folder, env=test_environ(located.folder, root))


# ---------------------------------------------------------------------------------- in a scratch copy
#: What some environments' code and tests read from NeMo Gym's repository root besides ``resources_servers/``
#: (benchmark configs and modules, its agents and models): linked into a staged root when the source tree has them.
SHARED_ROOT_FOLDERS = (
    "benchmarks",
    "environment_servers",
    "environments",
    "responses_api_agents",
    "responses_api_models",
)
_SIBLING_IMPORT = re.compile(r"\bresources_servers\.(\w+)")
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".venv")


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


def stage_environment(source: Path, root: Path, *, link_other_environments: bool = False) -> Path:
    """Lay environment folder ``source`` out under ``root`` as NeMo Gym's repository holds it; return its copy.

    ``source`` is copied to ``root/resources_servers/<name>`` (its tests may write next to themselves), with the
    sibling environments it imports (found next to it, transitively); ``link_other_environments`` links every
    other sibling too (a whole extracted NeMo Gym tree). The ``SHARED_ROOT_FOLDERS`` beside the source's
    ``resources_servers/`` are linked, not copied."""
    source = Path(source).absolute()
    (root / "resources_servers").mkdir(parents=True, exist_ok=True)
    pending, staged = [source], set()
    while pending:
        folder = pending.pop()
        if folder.name in staged:
            continue
        staged.add(folder.name)
        shutil.copytree(folder, root / "resources_servers" / folder.name, ignore=_NOT_COPIED, symlinks=True)
        siblings = (source.parent / name for name in referenced_environments(folder))
        pending.extend(sibling for sibling in siblings if sibling.is_dir() and sibling.name not in staged)
    if link_other_environments:
        for sibling in source.parent.iterdir():
            if sibling.is_dir() and sibling.name not in staged:
                (root / "resources_servers" / sibling.name).symlink_to(sibling, target_is_directory=True)
    for shared in SHARED_ROOT_FOLDERS:
        target = source.parent.parent / shared
        if target.is_dir() and not (root / shared).exists():
            (root / shared).symlink_to(target, target_is_directory=True)
    return root / "resources_servers" / source.name


@dataclass
class TestCounts:
    """What pytest's JUnit report says: tests passed, failed, errored, skipped; a line per failure."""

    __test__ = False

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        """The four counts by name (``passed``, ``failed``, ``errors``, ``skipped``)."""
        return {"passed": self.passed, "failed": self.failed, "errors": self.errors, "skipped": self.skipped}


def read_junit(path: Path) -> TestCounts:
    """The counts of pytest's JUnit XML report at ``path``, one outcome per test case; all zero when pytest
    wrote none or an unreadable one (it stopped before collecting: its output says why)."""
    counts = TestCounts()
    try:
        cases = ElementTree.parse(path).getroot().iter("testcase")
    except (OSError, ElementTree.ParseError):
        return counts
    for case in cases:
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts.passed += 1
        elif outcome.tag == "skipped":
            counts.skipped += 1
        else:
            if outcome.tag == "failure":
                counts.failed += 1
            else:
                counts.errors += 1
            message = (outcome.get("message") or "").strip().splitlines()
            test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
            counts.failures.append(f"{test_id}: {message[0][:300] if message else outcome.tag}")
    return counts


@dataclass
class EnvTestResult:
    """One environment's test run in a scratch copy: pytest's exit code, the counts, its output (tail kept)."""

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
        """Some test ran and none failed or errored."""
        return self.returncode == 0 and self.failed == 0 and self.errors == 0 and self.passed > 0


def reported_pytest_command(python: str, junit_xml: Path, extra: Sequence[str] = ()) -> list[str]:
    """``pytest_command`` under ``python``, quiet, with a JUnit report for the counts, then ``extra``."""
    options = ["-q", "-o", "asyncio_default_fixture_loop_scope=function", f"--junitxml={junit_xml}", *extra]
    return pytest_command(options, python=python)


def run_environment_tests(
    source: Path, *, python: str = sys.executable, timeout: float = 600, extra_args: Sequence[str] = ()
) -> EnvTestResult:
    """Run the tests of environment folder ``source`` in a scratch copy (``stage_environment``) under
    ``python``; never raises on test failures or a timeout (returncode -1, said in ``output``)."""
    source = Path(source).absolute()
    with tempfile.TemporaryDirectory(prefix=f"ngym-envtest-{source.name}-") as scratch:
        root = Path(scratch)
        folder = stage_environment(source, root)
        junit = root / "junit.xml"
        # NGYM_NEMO_ROOT: the compat layer's nemo_gym.PARENT_DIR (NeMo's repository root) is the staged root
        env = {**test_environ(folder, root), "NGYM_NEMO_ROOT": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            completed = subprocess.run(
                reported_pytest_command(python, junit, extra_args),
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return EnvTestResult(source.name, -1, output=f"timed out after {timeout:.0f}s\n{output[-4000:]}")
        counts = read_junit(junit)
        return EnvTestResult(
            source.name,
            completed.returncode,
            **counts.totals(),
            output=(completed.stdout + completed.stderr)[-20000:],
            failures=counts.failures,
        )
