"""Children ngym starts never import from the current folder (``python -P``), and the environment's own children
are not given that setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_runs import ROOT, run_ngym


@pytest.fixture
def beside_a_checkout(tmp_path: Path) -> Path:
    """A folder holding a broken ``ngym/`` package, as the folder above a checkout does."""
    (tmp_path / "ngym").mkdir()
    (tmp_path / "ngym" / "__init__.py").write_text("raise ImportError('imported ./ngym, not the installed ngym')\n")
    return tmp_path


def test_rollout_from_beside_a_checkout_imports_the_installed_package(beside_a_checkout: Path) -> None:
    done = run_ngym(
        "rollout", "example_single_tool_call", "--model", "replay", "--output", "o.jsonl", cwd=beside_a_checkout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "imported ./ngym" not in done.stdout + done.stderr


def test_affine_workers_from_beside_a_checkout_import_the_installed_package(beside_a_checkout: Path) -> None:
    from ngym.child_server import serve_environment

    log = beside_a_checkout / "server.log"
    cwd = Path.cwd()
    os.chdir(beside_a_checkout)
    try:
        # example_session_state_mgmt keeps sessions in the process: --workers 2 is HAProxy + 2 worker processes
        with serve_environment("example_session_state_mgmt", workers=2, timeout=120, log=log) as url:
            import httpx

            assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    finally:
        os.chdir(cwd)
    assert "imported ./ngym" not in log.read_text()


def test_a_script_serving_itself_from_beside_a_checkout_imports_the_installed_package(beside_a_checkout: Path) -> None:
    """``python path/app.py`` (``run_webserver()``) from the folder above a checkout re-executes itself as ngym's host:
    that process does not import ``./ngym`` either (the script's own folder stays importable)."""
    from ngym.child_server import free_port, stop_process, wait_healthy

    port = free_port()
    app = Path(__file__).resolve().parents[1] / "fixtures" / "seed_weather" / "app.py"
    server = subprocess.Popen(
        [sys.executable, str(app), f"port={port}", "domain=agent"],
        cwd=beside_a_checkout,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server, 60, path="/")
    finally:
        stop_process(server)


def test_the_safe_path_ngym_sets_is_not_passed_on_to_the_environments_own_children(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ngym.child_python import SAFE_PATH_ENV, children_use_safe_path, forget_safe_path

    monkeypatch.delenv(SAFE_PATH_ENV, raising=False)
    children_use_safe_path()
    assert os.environ[SAFE_PATH_ENV] == "1"
    forget_safe_path()
    assert SAFE_PATH_ENV not in os.environ
    monkeypatch.setenv(SAFE_PATH_ENV, "1")  # the user's own: kept
    children_use_safe_path()
    forget_safe_path()
    assert os.environ[SAFE_PATH_ENV] == "1"


def python_commands_without_safe_path(source: str) -> list[str]:
    """Command lists in ``source`` that start Python on a module or code (``[python, "-m", ...]``,
    ``[sys.executable, "-c", ...]``) without ``-P``: such a child imports from the folder it starts in first."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List) and len(node.elts) >= 2:
            first, second = ast.unparse(node.elts[0]), node.elts[1]
            starts_python = first == "sys.executable" or "python" in first.lower()
            if starts_python and isinstance(second, ast.Constant) and second.value in ("-m", "-c"):
                found.append(ast.unparse(node)[:80])
    return found


#: Python started without ``-P`` on purpose, and why.
WITHOUT_SAFE_PATH = {
    # an environment's own tests, run as NeMo Gym's `gym env test` runs them (from the environment's folder)
    "ngym/envtest.py",
    # a wheel built from a project's folder runs that project's own build code, which may import its neighbours;
    # pip run by an environment's own interpreter, which may be a Python before 3.11 (no -P)
    "ngym/containerize/source_wheels.py",
    "ngym/containerize/pip.py",
    "ngym/containerize/wheelhouse.py",
    # commands that run inside an image, from its WORKDIR (the Dockerfile's, a Kubernetes container's)
    "ngym/containerize/build.py",
    "ngym/containerize/dockerfile.py",
    "ngym/fleet/kubernetes.py",
}


def test_every_python_child_ngym_starts_runs_with_safe_path() -> None:
    """Fleet units, the head server, `ngym demo`'s rollouts, pip, a unit's venv installs: ``python -P``
    (``ngym.child_python.python_module``), whatever folder ngym is run from."""
    package = ROOT / "ngym"
    found = {
        str(path.relative_to(ROOT)): commands
        for path in sorted(package.rglob("*.py"))
        if (commands := python_commands_without_safe_path(path.read_text()))
    }
    assert set(found) == WITHOUT_SAFE_PATH, found


def test_the_safe_path_check_can_fail() -> None:
    source = "cmd = [sys.executable, '-m', 'ngym.cli', 'run']\nok = [sys.executable, '-P', '-m', 'x']\n"
    assert python_commands_without_safe_path(source) == ["[sys.executable, '-m', 'ngym.cli', 'run']"]
