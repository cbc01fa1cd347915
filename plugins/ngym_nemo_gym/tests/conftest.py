"""Fixtures: NeMo Gym 0.7.0's environments, taken from its wheel (cached), and servers on real sockets.

The wheel is ``~/.cache/ngym/nemo-wheel/nemo_gym-0.7.0-py3-none-any.whl``, downloaded with
``pip download --no-deps --ignore-requires-python nemo-gym==0.7.0`` when absent. Without it (no network) the
tests that need it are skipped, except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ngym_nemo_gym.envtests import referenced_environments

from ngym import envtest
from ngym.config import cache_root
from ngym.rollout.thread_server import serve_app_in_thread

WHEEL_DIR = cache_root() / "nemo-wheel"
WHEEL_NAME = "nemo_gym-0.7.0-py3-none-any.whl"
#: What environments read from NeMo Gym's root besides resources_servers/: the test runner's one list.
SHARED_ROOT_FOLDERS = tuple(f"{folder}/" for folder in envtest.SHARED_ROOT_FOLDERS)


def _nemo_wheel() -> Path:
    wheel = WHEEL_DIR / WHEEL_NAME
    if not wheel.exists():
        WHEEL_DIR.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--ignore-requires-python"]
        done = subprocess.run([*command, "nemo-gym==0.7.0", "-d", str(WHEEL_DIR)], capture_output=True, text=True)
        if done.returncode != 0 or not wheel.exists():
            message = f"NeMo Gym 0.7.0's wheel is not cached and could not be downloaded: {done.stderr[-500:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
    return wheel


@pytest.fixture(scope="session")
def nemo_environment(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``nemo_environment(name)`` → the folder of NeMo Gym environment ``name`` (and the siblings it imports),
    extracted from the wheel into a scratch ``resources_servers/``."""
    wheel = _nemo_wheel()
    root = tmp_path_factory.mktemp("nemo") / "resources_servers"
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    # What environments read from NeMo Gym's root besides resources_servers/ (benchmark configs, its agents).
    archive.extractall(root.parent, [m for m in names if m.startswith(SHARED_ROOT_FOLDERS)])

    def extract(name: str) -> Path:
        folder = root / name
        if not folder.exists():
            members = [m for m in names if m.startswith(f"resources_servers/{name}/")]
            if not members:
                raise LookupError(f"NeMo Gym 0.7.0 has no environment {name!r}")
            archive.extractall(root.parent, members)
            for sibling in referenced_environments(folder):
                if any(m.startswith(f"resources_servers/{sibling}/") for m in names):
                    extract(sibling)
        return folder

    return extract


@pytest.fixture
def import_nemo_app(nemo_environment: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Any]:
    """``import_nemo_app(name)`` → NeMo Gym environment ``name``'s ``app`` module, imported as
    ``resources_servers.<name>.app`` from the wheel's copy (sys.path and modules restored afterwards);
    ``import_nemo_app(name, "environment")`` another of its modules."""

    def load(name: str, submodule: str = "app") -> Any:
        folder = nemo_environment(name)
        # Other resources_servers/ folders are on the path: ngym's own repository (regular packages with some of
        # NeMo's names) and site-packages once NeMo Gym environments are installed there. The package is pinned
        # to the wheel's copy alone instead of taking those entries off sys.path, which would also take away
        # everything else installed beside them (site-packages: "No module named 'pathspec'").
        for module in [m for m in sys.modules if m == "resources_servers" or m.startswith("resources_servers.")]:
            monkeypatch.delitem(sys.modules, module)
        spec = importlib.machinery.ModuleSpec("resources_servers", None, is_package=True)
        spec.submodule_search_locations = [str(folder.parent)]
        monkeypatch.setitem(sys.modules, "resources_servers", importlib.util.module_from_spec(spec))
        monkeypatch.syspath_prepend(str(folder.parent.parent))  # NeMo's root: benchmarks/ and the like
        return importlib.import_module(f"resources_servers.{name}.{submodule}")

    return load


#: Serve an ASGI app with uvicorn on a free 127.0.0.1 port in a thread; yields its base URL (ngym's own helper).
serve_on_socket = serve_app_in_thread


@pytest.fixture
def clean_server_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No server URLs or run config leak in from the environment or from another test."""
    from ngym_nemo_gym.servers import GLOBAL_CONFIG_ENV, SERVER_URLS_ENV

    monkeypatch.delenv(SERVER_URLS_ENV, raising=False)
    monkeypatch.delenv(GLOBAL_CONFIG_ENV, raising=False)


#: The image Docker tests run: built locally by docker/ci-setup.sh (nothing can be pulled here).
BASE_IMAGE = "ngym-base:bookworm"


@pytest.fixture
def docker_base_image() -> str:
    """``BASE_IMAGE`` when the Docker engine answers and has it; else a skip (a failure under ``CI=true``)."""
    try:
        import docker

        docker.from_env().images.get(BASE_IMAGE)
    except Exception:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the Docker engine or {BASE_IMAGE} is missing (run docker/ci-setup.sh)")
        pytest.skip(f"the Docker engine or {BASE_IMAGE} is missing")
    return BASE_IMAGE
