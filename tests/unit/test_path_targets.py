"""A path-shaped target (``./env``, ``env/``, ``app.py:Class``) that is not there is one clear error, never the
installed environment of that name."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngym.errors import ConfigError
from tests.support.cli_runs import run_ngym


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
    done = run_ngym("run", "./example_single_tool_call", "--port", "1", cwd=tmp_path, timeout=60)
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
