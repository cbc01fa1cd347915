"""Environment variables an environment declares (``required_env``): named first by run, validate, prepare,
containerize and install when unset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli_runs import fresh_environment, run_ngym


def _needing_a_variable(tmp_path: Path, in_config: bool = False) -> Path:
    folder = fresh_environment(tmp_path)
    if in_config:
        config = next((folder / "configs").glob("*.yaml"))
        config.write_text(
            config.read_text() + "      required_env:\n        NGYM_TEST_ROWS: a JSONL file of dataset rows\n"
        )
    else:
        app = folder / "app.py"
        marker = "    session_state_model = "
        source = app.read_text()
        app.write_text(
            source.replace(
                marker, '    required_env = {"NGYM_TEST_ROWS": "a JSONL file of dataset rows"}\n' + marker, 1
            )
        )
    return folder


@pytest.mark.parametrize("in_config", [False, True], ids=["class", "config"])
def test_run_validate_prepare_and_containerize_name_a_missing_variable_first(tmp_path: Path, in_config: bool) -> None:
    folder = _needing_a_variable(tmp_path, in_config)
    env = {"NGYM_TEST_ROWS": ""}
    for command in (
        ("run", str(folder), "--port", "1"),
        ("validate", str(folder)),
        ("prepare", str(folder)),
        ("containerize", str(folder), "--run", "--base-image", "no-such-image:never-pulled"),
    ):
        done = run_ngym(*command, cwd=tmp_path, env=env, timeout=120)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "needs the environment variable NGYM_TEST_ROWS (a JSONL file of dataset rows), not set here" in (
            done.stderr
        ), (command, done.stderr)
        assert "Traceback" not in done.stderr
    # containerize --run takes it with -e: the check passes (and the build is what fails next, on the base image)
    given = run_ngym(
        "containerize", str(folder), "--run", "-e", "NGYM_TEST_ROWS=/data/rows.jsonl", "--base-image",
        "no-such-image:never-pulled", cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert "NGYM_TEST_ROWS" not in given.stderr, given.stderr


def test_a_declared_variable_that_is_set_lets_the_environment_serve(tmp_path: Path) -> None:
    from ngym.cli.run import build_specs

    folder = _needing_a_variable(tmp_path)
    os.environ["NGYM_TEST_ROWS"] = "/tmp/rows.jsonl"
    try:
        assert build_specs((str(folder),), None, None)
    finally:
        del os.environ["NGYM_TEST_ROWS"]


def test_install_names_the_variables_an_installed_environment_needs(tmp_path: Path) -> None:
    folder = _needing_a_variable(tmp_path)
    distribution = folder.name.replace("_", "-")
    try:
        done = run_ngym("install", str(folder), cwd=tmp_path, env={"NGYM_TEST_ROWS": ""}, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (
            f"ngym: before it serves a rollout: {folder.name} needs the environment variable NGYM_TEST_ROWS "
            "(a JSONL file of dataset rows), not set here: set it in the shell that runs it"
        ) in done.stdout
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", distribution], capture_output=True)
