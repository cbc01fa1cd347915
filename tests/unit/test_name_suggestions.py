"""A mistyped environment name: every command that takes one suggests the near miss, installs from NeMo Gym too."""

from __future__ import annotations

from pathlib import Path

import pytest

WEATHER_ROWS = Path(__file__).resolve().parents[2] / "resources_servers/example_single_tool_call/data/example.jsonl"


@pytest.mark.parametrize(
    "command",
    [
        ["run"],
        ["test"],
        ["validate"],  # (profile resolves the same way; it imports locust, which patches ssl: not in-process)
        ["containerize", "--output", "{tmp}/ctx"],
        ["rollout", "--data", str(WEATHER_ROWS), "--model-url", "http://127.0.0.1:9/v1"],
        ["uninstall", "-y"],
    ],
    ids=lambda command: command[0],
)
def test_every_command_taking_an_environment_name_suggests_the_near_miss(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ngym.cli import main

    args = [part.format(tmp=tmp_path) for part in command]
    with pytest.raises(SystemExit) as exited:
        main([args[0], "example_single_tool_cal", *args[1:]])
    assert exited.value.code not in (0, None)
    err = capsys.readouterr().err
    assert "did you mean 'example_single_tool_call'?" in err and "Traceback" not in err


def test_install_from_nemo_gym_suggests_the_near_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import zipfile

    from ngym.cli import main

    with zipfile.ZipFile(tmp_path / "nemo_gym-0.7.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("resources_servers/wordle/app.py", "")
    monkeypatch.setenv("NGYM_NEMO_WHEEL_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        main(["install", "nemo-gym:wordel"])
    assert exited.value.code not in (0, None)
    assert "no environment 'wordel'; did you mean 'wordle'?" in capsys.readouterr().err
