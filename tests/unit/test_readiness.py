"""What an environment still needs before it serves (prepared data, credentials, config values), and
``ngym prepare`` running the data step once."""

from __future__ import annotations

from pathlib import Path

import pytest

NEEDS_DATA_APP = """
from pathlib import Path
from typing import Any

from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer

WORDS = Path(__file__).parent / "data" / "words.txt"


class NeedsDataServer(SimpleResourcesServer):
    domain = Domain.GAMES

    async def seed_session(self, request, body):
        if not WORDS.is_file():
            raise FileNotFoundError(f"{WORDS} not found. Run `python generate_data.py` first.")
        return {}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)
"""


@pytest.fixture
def needs_data_env(tmp_path: Path) -> Path:
    """An environment like NeMo Gym's wordle: it installs and imports, but serves nothing before its script ran."""
    folder = tmp_path / "needs_data"
    (folder / "configs").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "app.py").write_text(NEEDS_DATA_APP)
    (folder / "generate_data.py").write_text(
        "from pathlib import Path\n(Path(__file__).parent / 'data' / 'words.txt').write_text('crane\\n')\n"
    )
    (folder / "prepare_stats.py").write_text("raise SystemExit('a dataset tool, never run by ngym')\n")
    (folder / "configs" / "needs_data.yaml").write_text(
        "needs_data:\n  resources_servers:\n    needs_data:\n      entrypoint: app.py\n      domain: games\n"
        "      api_key: null\n"
    )
    return folder


def test_what_an_environment_still_needs_is_named_with_the_step(needs_data_env: Path) -> None:
    from ngym.readiness import needs

    found = needs("needs_data", needs_data_env, {"api_key": None, "judge_name": "???", "port": 0})
    assert [(need.kind, need.command) for need in found] == [
        ("prepared data", "ngym prepare needs_data"),
        ("credentials", None),
        ("a config value", None),
    ]
    assert "generate_data.py" in found[0].detail  # the script the server's error names, not prepare_stats.py
    assert "api_key=VALUE" in found[1].detail and "judge_name=VALUE" in found[2].detail


def test_ngym_prepare_runs_the_step_once_and_then_nothing_is_needed(
    needs_data_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ngym.cli import main
    from ngym.readiness import needs

    with pytest.raises(SystemExit) as exited:
        main(["prepare", str(needs_data_env / "configs" / "needs_data.yaml")])
    assert exited.value.code in (0, None), capsys.readouterr().err
    assert (needs_data_env / "data" / "words.txt").read_text() == "crane\n"
    assert "prepared needs_data (generate_data.py ran)" in capsys.readouterr().out
    assert not [n for n in needs("needs_data", needs_data_env, {}) if n.kind == "prepared data"]
    with pytest.raises(SystemExit) as again:
        main(["prepare", str(needs_data_env / "configs" / "needs_data.yaml")])
    assert again.value.code == 1 and "already prepared" in capsys.readouterr().err


def test_ngym_prepare_says_when_there_is_nothing_to_run(capsys: pytest.CaptureFixture[str]) -> None:
    from ngym.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["prepare", "example_single_tool_call"])
    assert exited.value.code == 1
    assert "example_single_tool_call has no data-preparation step" in capsys.readouterr().err


def test_ngym_run_says_what_is_missing_before_serving(needs_data_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ngym.cli.run import build_specs

    config = str(needs_data_env / "configs" / "needs_data.yaml")
    build_specs((config,), None, None)
    err = capsys.readouterr().err
    assert "needs_data still needs prepared data" in err and "run `ngym prepare needs_data`" in err
    assert "needs_data still needs credentials (api_key is unset" in err
    build_specs((config, "api_key=k"), None, None)
    assert "credentials" not in capsys.readouterr().err  # given on the command line
