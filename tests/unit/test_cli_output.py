"""CLI output a person reads: quiet set-up, runnable next steps, help and tables that fit, visible progress, and
prompts that never crash without a terminal."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from ngym.cli import cli
from ngym.cli.invocation import ngym_command
from ngym.cli.progress import Ticker
from ngym.listing import ServerInfo


def test_help_lists_every_command_without_cutting_descriptions_short() -> None:
    out = CliRunner().invoke(cli, ["--help"], terminal_width=80).output
    commands = out.split("Commands:")[1]
    assert "…" not in commands and "..." not in commands
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "validate" in commands and "rollout" in commands


def _row(name: str, description: str) -> ServerInfo:
    return ServerInfo(
        name=name,
        domain="agent",
        distribution=f"ngym-{name}",
        version="0.1.0",
        status="ok",
        description=description,
        reason=None,
        target=name,
    )


@pytest.mark.parametrize("width", [60, 80, 100, 200])
def test_list_table_fits_the_terminal(width: int) -> None:
    from ngym.cli.list import _render

    rows = [_row("example_session_state_mgmt", "Counter: a per-rollout counter with increment/get tools; " * 3)]
    text = _render(rows, width=width)
    assert all(len(line) <= max(width, 28 + 7 + 8 + 30 + 2 * 3) for line in text.splitlines()), text
    assert text.splitlines()[1].startswith("example_session_state_mgmt")
    assert len(text.splitlines()) <= 3  # header + two description lines at most
    assert ("DISTRIBUTION" in text) == (width >= 200)


def test_init_next_steps_name_the_executable_in_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("ngym", "ng_init_resources_server"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.chdir(tmp_path)
    # venv not active: the printed command is the path typed, which works again as shown
    assert ngym_command(".venv/bin/ngym", path="/usr/bin") == ".venv/bin/ngym"
    assert ngym_command(str(bin_dir / "ng_init_resources_server"), path="/usr/bin") == ".venv/bin/ngym"
    # venv active (its bin first on PATH): plain `ngym`
    assert ngym_command("ngym", path=str(bin_dir)) == "ngym"
    assert ngym_command(str(bin_dir / "ngym"), path=str(bin_dir)) == "ngym"
    assert ngym_command("/x/__main__.py").endswith(" -m ngym.cli")


def test_init_prints_a_next_line_that_runs(tmp_path: Path) -> None:
    """Run the real console script by path, PATH without the venv: the printed ngym command exists as typed."""
    script = Path(sys.executable).parent / "ngym"
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [str(script), "init", "my_env", "--dir", str(tmp_path)], capture_output=True, text=True, env=env, check=True
    ).stdout
    next_line = out.splitlines()[-1]
    first = next_line.removeprefix("next: ").split()[0]
    assert first != "ngym" and shutil.which(first, path=env["PATH"]) or Path(first).is_file(), next_line
    assert subprocess.run([first, "--version"], capture_output=True, env=env).returncode == 0


def test_ngym_install_is_quiet_and_says_what_happened() -> None:
    done = CliRunner().invoke(cli, ["install", "click"])  # already installed: real pip, no index needed
    assert done.exit_code == 0
    assert done.output.strip().splitlines() == ["click: already installed (nothing to do; -U upgrades)"]


def test_ngym_install_failure_is_short_and_names_pip_error(tmp_path: Path) -> None:
    failed = CliRunner().invoke(cli, ["install", str(tmp_path / "no_such_dir")])
    assert failed.exit_code != 0
    lines = failed.output.strip().splitlines()
    assert lines[0].startswith("ngym: error: pip could not install") and len(lines) < 20
    assert any("ERROR" in line for line in lines) and "-v" in lines[-1]


def test_ticker_prints_plain_progress_lines_without_a_terminal() -> None:
    stream = io.StringIO()
    with Ticker("installing x", lambda: "Collecting numpy", every=0.05, stream=stream, tty=False):
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all("installing x: Collecting numpy (" in line for line in lines)


def test_ticker_redraws_one_line_on_a_terminal_and_clears_it() -> None:
    stream = io.StringIO()
    with Ticker("building", lambda: "step 3/9", stream=stream, tty=True):
        time.sleep(0.35)
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r\033[K") >= 3 and text.endswith("\r\033[K")


def test_demo_explains_a_recorded_zero_where_it_is_printed() -> None:
    from ngym.demo import _status

    assert _status([1.0, 0.0, 0.0], [], 0) == "ok, as recorded (2 recorded wrong answers score 0.0)"
    assert _status([1.0, 0.0], [], 0) == "ok, as recorded (1 recorded wrong answer scores 0.0)"
    assert _status([1.0], [], 0) == "ok, as recorded"
    assert _status([1.0, 0.0], [1], 0).startswith("MISMATCH at rows [1]")


def test_run_has_no_refresh_option_any_more() -> None:
    """The hidden no-op ``--refresh`` (kept for scripts of 0.1.0) is gone: it is an unknown target now."""
    result = CliRunner().invoke(cli, ["run", "--refresh", "no_such_environment_here"])
    assert "deprecated" not in result.output
    assert result.exit_code != 0 and "--refresh" in f"{result.output}{result.exception}"


def test_uninstall_without_a_terminal_asks_for_y_instead_of_crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    """pip would prompt on a closed stdin and die with an EOFError traceback (exit 2)."""
    from click.testing import CliRunner

    from ngym.cli import cli

    calls: list[list[str]] = []

    def run_pip(args: list[str]) -> int:
        calls.append(list(args))
        return 0

    monkeypatch.setattr("ngym.installer.run_pip", run_pip)
    result = CliRunner().invoke(cli, ["uninstall", "click"])  # CliRunner's stdin is not a terminal
    assert result.exit_code == 2 and calls == []
    assert "add -y" in result.output and "Traceback" not in result.output


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
