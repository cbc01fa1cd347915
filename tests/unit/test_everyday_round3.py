"""Everyday use, round 3: a new user's own environment and mistakes get the right result or one clear line."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ngym.errors import ConfigError
from ngym.scaffold import scaffold

ROOT = Path(__file__).resolve().parents[2]
NGYM = str(Path(sys.executable).parent / "ngym")


def _ngym(
    *args: str, cwd: Path, timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **(env or {})}
    environ.pop("NGYM_DEBUG", None)
    return subprocess.run([NGYM, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environ)


def _environment(tmp_path: Path, verify_reward: str | None = None) -> Path:
    """A fresh ``ngym init`` environment; ``verify_reward``: an expression its verify returns instead."""
    folder = scaffold(f"tool_{uuid.uuid4().hex[:8]}", parent=tmp_path)
    if verify_reward is not None:
        app = folder / "app.py"
        source = app.read_text()
        marker = "            reward=1.0 if correct else 0.0,"
        assert marker in source
        app.write_text(source.replace(marker, f"            reward={verify_reward},"))
    return folder


# S3: a path-shaped target never falls back to the installed environment of that name


def test_a_path_shaped_target_that_is_not_there_never_serves_the_installed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ngym.cli.run import build_specs
    from ngym.targets import resolve

    monkeypatch.chdir(tmp_path)  # no ./example_single_tool_call here
    for target in ("./example_single_tool_call", "example_single_tool_call/", "~/no/example_single_tool_call"):
        with pytest.raises(ConfigError, match="no such file or folder"):
            resolve(target)
    with pytest.raises(ConfigError) as raised:
        build_specs(("./example_single_tool_call",), None, None)
    message = str(raised.value)
    assert "./example_single_tool_call: no such file or folder" in message
    assert "give its name without the path: example_single_tool_call" in message
    assert resolve("example_single_tool_call").name == "example_single_tool_call"  # a bare name still resolves


def test_ngym_run_of_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _ngym("run", "./example_single_tool_call", "--port", "1", cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no such file or folder" in done.stderr and "Traceback" not in done.stderr


def test_containerize_and_test_of_a_missing_folder_never_mean_the_installed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ngym.containerize.errors import PluginSourceError
    from ngym.containerize.spec import resolve_plugin
    from ngym.envtest import locate

    monkeypatch.chdir(tmp_path)
    with pytest.raises(PluginSourceError, match="./example_single_tool_call: no such folder"):
        resolve_plugin("./example_single_tool_call")
    with pytest.raises(ConfigError, match="./example_single_tool_call: no such folder"):
        locate("./example_single_tool_call")


# S1: a reward outside the environment's reward_range is a counted failure, never part of a mean


def test_health_reports_the_reward_range() -> None:
    from fastapi.testclient import TestClient

    from ngym.testing import app_for

    with TestClient(app_for("example_single_tool_call")) as client:
        assert client.get("/health").json()["reward_range"] == [0.0, 1.0]


def test_rollout_fails_loudly_on_a_reward_above_one(tmp_path: Path) -> None:
    folder = _environment(tmp_path, verify_reward="2.0 if correct else 0.0")
    out = tmp_path / "out.jsonl"
    done = _ngym("rollout", str(folder), "--model", "replay", "--output", str(out), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "reward 2.0 is not a number in [0, 1]" in done.stdout
    assert "failed" in done.stdout and "mean reward 1." not in done.stdout and "mean reward 2" not in done.stdout
    written = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert all(row["reward"] <= 1.0 for row in written)  # the out-of-range ones are failures, not results


def test_profile_counts_a_reward_above_one_as_a_failed_rollout(tmp_path: Path) -> None:
    folder = _environment(tmp_path, verify_reward="2.0")  # every rollout: 2.0
    done = _ngym("profile", str(folder), "--users", "1", "--duration", "2s", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["rollouts_finished"] == 0 and result["rollouts_failed"] > 0 and result["mean_reward"] is None
    assert "reward 2.0 is not a number in [0, 1]" in done.stderr


# S4: a stale recording is told apart from a broken server


def _stale(folder: Path) -> None:
    """Flip the recorded reward of the first example rollout (as if verify had changed since it was recorded)."""
    path = folder / "data" / "example_rollouts.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows[0]["reward"] = 1.0 - rows[0]["reward"]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_profile_names_the_rows_a_stale_recording_scores_differently_and_exits_0(tmp_path: Path) -> None:
    folder = _environment(tmp_path)
    _stale(folder)
    done = _ngym("profile", str(folder), "--users", "1", "--duration", "2s", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "row 0: recorded" in done.stdout and "the recording may be stale" in done.stdout
    assert "0 failed" in done.stdout


def test_rollout_with_the_replay_model_says_a_recording_may_be_stale(tmp_path: Path) -> None:
    folder = _environment(tmp_path)
    _stale(folder)
    data = folder / "data" / "example_rollouts.jsonl"
    done = _ngym("rollout", str(folder), "--data", str(data), "--model", "replay", "--output", "o.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "row 0: recorded" in done.stdout and "the recording may be stale" in done.stdout


# Friction 1: child processes never import from the current folder


@pytest.fixture
def beside_a_checkout(tmp_path: Path) -> Path:
    """A folder holding a broken ``ngym/`` package, as the folder above a checkout does."""
    (tmp_path / "ngym").mkdir()
    (tmp_path / "ngym" / "__init__.py").write_text("raise ImportError('imported ./ngym, not the installed ngym')\n")
    return tmp_path


def test_rollout_from_beside_a_checkout_imports_the_installed_package(beside_a_checkout: Path) -> None:
    done = _ngym(
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
    app = ROOT / "tests" / "fixtures" / "seed_weather" / "app.py"
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


# Friction 9: --model-url at a server that does not speak the model API


@pytest.fixture
def not_a_model_server() -> Iterator[str]:
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(404)
            self.end_headers()

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def test_a_model_url_without_the_model_api_is_one_line_naming_the_cause(
    tmp_path: Path, not_a_model_server: str
) -> None:
    done = _ngym("rollout", "example_single_tool_call", "--model-url", not_a_model_server, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "/v1/models found no model (HTTP 404: no /models there)" in done.stderr
    assert "OpenAI-compatible" in done.stderr and "no model name" not in done.stdout + done.stderr


def test_a_model_url_at_a_server_without_post_names_the_cause_with_a_model_given(tmp_path: Path) -> None:
    """A static file server (HTTP 501 to every POST) given with --model: each failure says there is no POST
    .../responses there, not only the server's error page."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        done = _ngym(
            "rollout",
            "example_single_tool_call",
            "--model-url",
            url,
            "--model",
            "m",
            "--max-retries",
            "0",
            cwd=tmp_path,
        )
    finally:
        server.shutdown()
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"(no POST {url}/responses there: not an OpenAI Responses API server" in done.stdout + done.stderr


# Friction 11: make's progress lines are a few, not one every 15 s


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


# S4: the environment variables an environment needs are declared and checked first, by name


def _needing_a_variable(tmp_path: Path, in_config: bool = False) -> Path:
    folder = _environment(tmp_path)
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
        done = _ngym(*command, cwd=tmp_path, env=env, timeout=120)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "needs the environment variable NGYM_TEST_ROWS (a JSONL file of dataset rows), not set here" in (
            done.stderr
        ), (command, done.stderr)
        assert "Traceback" not in done.stderr
    # containerize --run takes it with -e: the check passes (and the build is what fails next, on the base image)
    given = _ngym(
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


# Friction 3: -e and -v for containerize --run's smoke container


def test_containerize_env_and_volume_options_parse_as_docker_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ngym.containerize.run_inputs import parse_env, parse_volumes

    monkeypatch.setenv("FROM_SHELL", "shell value")
    assert parse_env(["A=1", "B=x=y", "FROM_SHELL"]) == {"A": "1", "B": "x=y", "FROM_SHELL": "shell value"}
    with pytest.raises(ConfigError, match="-e NOT_SET_HERE_E33: NOT_SET_HERE_E33 is not set in this shell"):
        parse_env(["NOT_SET_HERE_E33"])
    assert parse_volumes([f"{tmp_path}:/data:ro", f"{tmp_path}:/rw"]) == [f"{tmp_path}:/data:ro", f"{tmp_path}:/rw:rw"]
    for bad in ("nocolon", f"{tmp_path}:relative", f"{tmp_path / 'missing'}:/data"):
        with pytest.raises(ConfigError):
            parse_volumes([bad])


def test_containerize_without_run_refuses_e_and_v_in_one_line(tmp_path: Path) -> None:
    done = _ngym("containerize", "example_single_tool_call", "-e", "A=1", cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "-e and -v apply to --run" in done.stderr, done.stderr


# Friction 2: a long wait says what it waits for, with the log


def test_waiting_for_an_environment_shows_progress_with_its_log(tmp_path: Path) -> None:
    from ngym.child_server import EnvironmentStartError, free_port, wait_healthy

    log = tmp_path / "server.log"
    code = "import time; print('downloading the dataset (attempt 2)', flush=True); time.sleep(600)"
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):  # until the line is written (bounded: 60 s)
            if log.read_text():
                break
            threading.Event().wait(0.1)
        said: list[str] = []
        with pytest.raises(EnvironmentStartError):
            wait_healthy(f"http://127.0.0.1:{free_port()}", process, 0.5, log, progress=said.append, every=0.0)
    finally:
        process.kill()
        process.wait()
    assert said, "no progress line"
    assert "waiting for the environment to answer" in said[0] and f"its log: {log}" in said[0]
    assert "its last line: downloading the dataset (attempt 2)" in said[0]


def test_install_names_the_variables_an_installed_environment_needs(tmp_path: Path) -> None:
    folder = _needing_a_variable(tmp_path)
    distribution = folder.name.replace("_", "-")
    try:
        done = _ngym("install", str(folder), cwd=tmp_path, env={"NGYM_TEST_ROWS": ""}, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        assert (
            f"ngym: before it serves a rollout: {folder.name} needs the environment variable NGYM_TEST_ROWS "
            "(a JSONL file of dataset rows), not set here: set it in the shell that runs it"
        ) in done.stdout
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", distribution], capture_output=True)
