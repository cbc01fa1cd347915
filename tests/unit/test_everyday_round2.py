"""Everyday use, round 2 (issue 21): mistakes a new user makes get a readable answer, never a silent change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ngym.config_tree import load_tree
from ngym.errors import ConfigError

JUDGE_YAML = """\
my_env:
  resources_servers:
    my_env:
      entrypoint: app.py
      domain: math
      judge_model_server:
        type: responses_api_models
        name: ???
"""


@pytest.fixture
def judge_config(tmp_path: Path) -> Path:
    path = tmp_path / "my_env.yaml"
    path.write_text(JUDGE_YAML)
    return path


def test_a_dotted_override_by_its_full_path_sets_the_value(judge_config: Path) -> None:
    tree = load_tree([judge_config], ["my_env.resources_servers.my_env.judge_model_server.name=judge"]).plain()
    assert tree["my_env"]["resources_servers"]["my_env"]["judge_model_server"]["name"] == "judge"


def test_a_dotted_override_without_its_prefix_names_the_full_path(judge_config: Path) -> None:
    """Was accepted silently: a new top-level branch nothing reads, and judge calls went to the policy model."""
    with pytest.raises(ConfigError) as raised:
        load_tree([judge_config], ["judge_model_server.name=judge"])
    assert "'judge_model_server.name' addresses nothing" in str(raised.value)
    assert "did you mean 'my_env.resources_servers.my_env.judge_model_server.name'" in str(raised.value)


def test_a_dotted_override_of_nothing_is_an_error(judge_config: Path) -> None:
    with pytest.raises(ConfigError, match="'foo.bar' addresses nothing in the config"):
        load_tree([judge_config], ["foo.bar=1"])


def test_a_dotted_override_may_add_a_field_to_an_instance(judge_config: Path) -> None:
    """A config field the YAML leaves to its default is still settable by its full path."""
    tree = load_tree([judge_config], ["my_env.resources_servers.my_env.port=9000"]).plain()
    assert tree["my_env"]["resources_servers"]["my_env"]["port"] == 9000


def test_cli_run_with_an_override_of_nothing_exits_2(judge_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ngym.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["run", str(judge_config), "judge_model_server.name=judge"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "my_env.resources_servers.my_env.judge_model_server.name" in err and "Traceback" not in err


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


BROKEN_APP = """
from ngym import BaseVerifyRequest, BaseVerifyResponse, Domain, SimpleResourcesServer


class BrokenServer(SimpleResourcesServer):
    domain = Domain.GAMES

    async def seed_session(self, request, body):
        raise FileNotFoundError("words.txt not found: run generate_data.py first")

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)
"""


def test_validate_says_each_distinct_failure_once_without_tracebacks(tmp_path: Path) -> None:
    """wordle without its generated data printed 25 identical tracebacks (1,263 lines) before the summary."""
    import json
    import subprocess
    import sys

    folder = tmp_path / "broken_env"
    (folder / "configs").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "app.py").write_text(BROKEN_APP)
    config = folder / "configs" / "broken_env.yaml"
    config.write_text(
        "broken_env:\n  resources_servers:\n    broken_env:\n      entrypoint: app.py\n      domain: games\n"
    )
    row = {"responses_create_params": {"input": [{"role": "user", "content": "play"}]}}
    (folder / "data" / "example.jsonl").write_text((json.dumps(row) + "\n") * 5)
    recorded = {**row, "response": {"output": []}, "reward": 0.0}
    (folder / "data" / "example_rollouts.jsonl").write_text((json.dumps(recorded) + "\n") * 5)
    quiet = subprocess.run(
        [sys.executable, "-m", "ngym.cli", "validate", str(config)], capture_output=True, text=True, timeout=120
    )
    assert quiet.returncode == 1
    assert "Traceback" not in quiet.stdout + quiet.stderr
    assert quiet.stdout.count("words.txt not found") == 2, quiet.stdout  # examples + the first soundness probe
    assert "5 rows (0, 1, 2, 3, 4)" in quiet.stdout and "the same failure as soundness: empty response" in quiet.stdout
    assert len(quiet.stdout.splitlines()) <= 10
    verbose = subprocess.run(
        [sys.executable, "-m", "ngym.cli", "validate", "-v", str(config)], capture_output=True, text=True, timeout=120
    )
    assert "Traceback" in verbose.stderr and "FileNotFoundError" in verbose.stderr


async def test_a_failed_model_call_carries_the_models_error_text() -> None:
    """math_with_judge's failure_reason read only "ClientResponseError: 400, message='Bad Request'"; why the
    model refused ("no recording for this input") was in the body, which never reached it."""
    import aiohttp
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    pytest.importorskip("nemo_gym")
    from nemo_gym.server_utils import ServerResponseError, raise_for_status

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"detail": "no recording for this input"}, status=400)

    app = web.Application()
    app.router.add_post("/v1/responses", refuse)
    async with (
        TestServer(app) as server,
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/v1/responses"), json={}) as response,
    ):
        with pytest.raises(ServerResponseError) as raised:
            await raise_for_status(response)
    assert raised.value.status == 400 and "no recording for this input" in str(raised.value)
    assert str(raised.value).startswith("400, message='Bad Request: ")


def test_scripted_judge_command_answers_every_request_with_its_verdict(tmp_path: Path) -> None:
    """`ngym scripted-judge` as a process on a free port, on both OpenAI routes a judge environment calls."""
    import subprocess
    import sys
    import time

    import httpx

    judge = subprocess.Popen(
        [sys.executable, "-m", "ngym.cli", "scripted-judge", "[[A=B]]", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert judge.stderr is not None
        line = judge.stderr.readline()
        assert "base URL http://127.0.0.1:" in line, line
        base = line.rsplit(" ", 1)[1].strip()
        for _ in range(100):
            try:
                answer = httpx.post(f"{base}/chat/completions", json={"messages": []}, timeout=5)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert answer.json()["choices"][0]["message"]["content"] == "[[A=B]]"
        responses = httpx.post(f"{base}/responses", json={"input": "judge this"}, timeout=5).json()
        assert responses["output"][0]["content"][0]["text"] == "[[A=B]]"
        assert httpx.get(f"{base.removesuffix('/v1')}/calls", timeout=5).json() == {"calls": 2}
    finally:
        judge.terminate()
        judge.wait(timeout=10)


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


class _Images:
    """The part of docker's ImageCollection build_image uses, over a dict of tag -> image id."""

    def __init__(self, tags: dict[str, str]) -> None:
        self.tags = tags
        self.removed: list[str] = []

    def get(self, ref: str) -> Any:
        from types import SimpleNamespace

        from docker.errors import ImageNotFound

        image_id = self.tags.get(ref, ref if ref.startswith("sha256:") else None)
        if image_id is None:
            raise ImageNotFound(ref)
        return SimpleNamespace(id=image_id, attrs={"Size": 1})

    def remove(self, image_id: str, noprune: bool = False) -> None:
        self.removed.append(image_id)


class _Api:
    def __init__(self, images: _Images, built: str) -> None:
        self.images, self.built = images, built

    def build(self, **kwargs: Any) -> Any:
        yield {"stream": "Step 1/1 : FROM scratch\n"}
        yield {"aux": {"ID": self.built}}

    def tag(self, image_id: str, repository: str, name: str) -> None:
        self.images.tags[f"{repository}:{name}"] = image_id


def test_a_rebuild_removes_the_image_its_tag_named_before(tmp_path: Path) -> None:
    """Every ngym containerize of a changed environment left the previous image behind, untagged."""
    from types import SimpleNamespace

    from ngym.containerize.build import build_image

    images = _Images({"ngym-env:latest": "sha256:old"})
    client: Any = SimpleNamespace(images=images, api=_Api(images, "sha256:new"))
    built = build_image(client, tmp_path, "ngym-env:latest")
    assert built.id == "sha256:new" and images.tags["ngym-env:latest"] == "sha256:new"
    assert images.removed == ["sha256:old"]
    again = build_image(client, tmp_path, "ngym-env:latest")  # unchanged (all cached): the same image, kept
    assert again.id == "sha256:new" and images.removed == ["sha256:old"]


def test_authoring_shows_the_columns_ngym_list_prints() -> None:
    """docs/authoring.md showed distribution and version columns a usual terminal does not print."""
    from ngym.cli.list import _render
    from ngym.listing import ServerInfo

    doc = (Path(__file__).resolve().parents[2] / "docs" / "authoring.md").read_text()
    shown = next(line for line in doc.splitlines() if line.startswith("ngym list  "))
    columns = next(line for line in doc.splitlines() if "(columns " in line)
    long = "A description as long as the built-ins' own, which wraps under its column on an 80-column terminal."
    rows = [
        ServerInfo(name=n, domain="agent", distribution=f"ngym-{n}", version="0.1.0", status="ok",
                   description=d, reason=None, target=n)
        for n, d in (("my_tool", "Look things up with one tool."), ("example_session_state_mgmt", long))
    ]  # fmt: skip
    header, first = _render(rows, width=80).splitlines()[:2]
    assert header.split() == ["NAME", "DOMAIN", "STATUS", "DESCRIPTION"]
    assert " ".join(header.split()) in columns and "DISTRIBUTION" in columns
    assert shown.split("#", 1)[1].split()[:3] == first.split()[:3] == ["my_tool", "agent", "ok"]


def test_scaffold_readme_ends_the_description_before_the_next_sentence(tmp_path: Path) -> None:
    from ngym.scaffold import scaffold

    folder = scaffold("guess_number", "games", tmp_path, description="Guess a number with higher/lower hints")
    readme = (folder / "README.md").read_text()
    assert "Guess a number with higher/lower hints.\n\nAn [ngym]" in readme


def test_an_invalid_domain_names_the_config_file_it_came_from(tmp_path: Path) -> None:
    from ngym.cli.run import build_specs
    from ngym.scaffold import scaffold
    from ngym.validation import validate

    folder = scaffold("guess_number", "games", tmp_path)
    config = folder / "configs" / "guess_number.yaml"
    config.write_text(config.read_text().replace("domain: games", "domain: gamez"))
    with pytest.raises(ConfigError) as raised:
        build_specs((str(config),), None, None)
    assert str(raised.value).startswith(f"{config}: guess_number: invalid domain 'gamez'")
    report = validate(str(config))
    assert str(config) in report.checks[0].detail and not report.ok


def test_the_smoke_rollout_prefers_a_row_recorded_at_one_and_says_what_it_checked(tmp_path: Path) -> None:
    """A first recorded rollout at 0.0 made the smoke test print "reward: 0.0 (expected 0.0)", read as a failure."""
    from ngym.cli.containerize import _smoke_summary
    from ngym.containerize.pipeline import resolve_plugin
    from ngym.containerize.smoke import load_example_rollout
    from ngym.scaffold import scaffold

    folder = scaffold("guess_number", "games", tmp_path)
    recorded = folder / "data" / "example_rollouts.jsonl"
    recorded.write_text("".join(reversed(recorded.read_text().splitlines(keepends=True))))  # the 0.0 row first
    plugin = resolve_plugin(str(folder))
    example = load_example_rollout(plugin)
    assert (example.line, example.expected_reward) == (2, 1.0)
    assert load_example_rollout(plugin, 0).expected_reward == 0.0  # an explicit row is still that row
    said = _smoke_summary({"reward": 1.0, "expected_reward": 1.0, "example_line": 2, "path": "seed → verify"})
    assert said.startswith("smoke rollout: example_rollouts.jsonl line 2 replayed in the container (seed → verify)")
    assert said.endswith(": reward 1.0, as recorded")
    assert "MISMATCH" in _smoke_summary({"reward": 0.0, "expected_reward": 1.0, "example_line": 2, "path": "p"})
