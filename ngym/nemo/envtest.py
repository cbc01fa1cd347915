"""``ngym test <name|folder>``: an environment's own tests, run the way NeMo Gym's ``gym env test`` runs them.

That is: pytest started from inside the environment's folder, pytest-asyncio in auto mode, and on
``PYTHONPATH`` the folder itself (``from app import ...``) and the folder holding ``resources_servers/``
(``from resources_servers.<name>.app import ...``). An installed environment is tested where pip put it; a
folder outside a ``resources_servers/`` tree is reached through a temporary ``resources_servers/<name>`` link.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from ngym.errors import EnvironmentNotFound, NgymError
from ngym.suggest import did_you_mean
from ngym.targets import installed, installed_names

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
    path = Path(target)
    if path.is_dir():
        folder = path.resolve()
        root = folder.parent.parent if folder.parent.name == "resources_servers" else None
        return TestTarget(folder.name, folder, root)
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
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(located.folder), str(root), os.environ.get("PYTHONPATH", "")) if p
        )
        return subprocess.call(pytest_command(extra_args), cwd=located.folder, env=env)
