"""run_environment_tests: the environment and the siblings it imports are staged as NeMo Gym's repository lays
them out, pytest runs inside the folder in asyncio auto mode, and the counts come back; the source is untouched."""

from __future__ import annotations

from pathlib import Path

from ngym_nemo_gym.envtests import referenced_environments, run_environment_tests


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_an_environment_with_a_sibling_base_runs_its_own_tests(tmp_path: Path) -> None:
    source = tmp_path / "src" / "resources_servers"
    _write(source / "base_env" / "base.py", "GREETING = 'hello'\n")
    _write(source / "game" / "app.py", "from resources_servers.base_env.base import GREETING\n")
    _write(
        source / "game" / "tests" / "test_app.py",
        "from app import GREETING\n"
        "from resources_servers.game.app import GREETING as SAME\n"
        "async def test_async_in_auto_mode():\n    assert GREETING == SAME == 'hello'\n"
        "def test_fails():\n    assert False, 'on purpose'\n",
    )
    _write(tmp_path / "src" / "benchmarks" / "game" / "config.yaml", "x: 1\n")
    assert referenced_environments(source / "game") == {"base_env"}

    result = run_environment_tests(source / "game", timeout=120)

    assert (result.passed, result.failed, result.errors) == (1, 1, 0), result.output
    assert not result.ok
    assert any("on purpose" in failure for failure in result.failures)
    assert sorted(p.name for p in (source / "game").rglob("*") if p.is_dir()) == ["tests"]  # no caches left behind


def test_the_compat_runner_runs_ngyms_one_gym_env_test_command(tmp_path: Path) -> None:
    """One definition of how ``gym env test`` runs pytest (``ngym test``'s): the compat runner adds only its
    report options after it."""
    from ngym_nemo_gym.envtests import pytest_command

    from ngym.envtest import pytest_command as ngym_test_command

    junit = tmp_path / "junit.xml"
    command = pytest_command("/some/python", junit, ["-x"])
    base = ngym_test_command(python="/some/python")
    assert command[: len(base)] == base and "asyncio_mode=auto" in base
    assert command[-2:] == [f"--junitxml={junit}", "-x"]
