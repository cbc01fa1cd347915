"""``ngym containerize --run -e/-v``: parsed as ``docker run`` parses them, refused without ``--run``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngym.errors import ConfigError
from tests.support.cli_runs import run_ngym


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
    done = run_ngym("containerize", "example_single_tool_call", "-e", "A=1", cwd=tmp_path, timeout=60)
    assert done.returncode == 2 and "-e and -v apply to --run" in done.stderr, done.stderr
