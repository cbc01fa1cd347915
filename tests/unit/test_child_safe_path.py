"""Children ngym starts never import from the current folder (``python -P``), and the environment's own children
are not given that setting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli_runs import run_ngym


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
