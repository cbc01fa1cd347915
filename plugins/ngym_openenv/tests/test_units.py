"""The OpenEnv plugin's pure parts: reward rules, URLs, domain resolution, the install dispatch and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from ngym_openenv import catalog, environment_venv, install_server
from ngym_openenv import install as install_module
from ngym_openenv.environment_venv import folder_requirements
from ngym_openenv.examples import (
    EXAMPLE_SEED,
    example_action,
    example_row,
    recorded_rollout,
    tool_name_and_schema,
)
from ngym_openenv.install import (
    OpenEnvInstallError,
    _domain,
    check_name_free,
    prepare,
)
from ngym_openenv.manifest import Manifest, ToolSpec, load_manifest
from ngym_openenv.project import write_example_data
from ngym_openenv.reward import NoReward, check_rule, episode_reward
from ngym_openenv.server import OpenEnvConfig
from ngym_openenv.wire import ws_url

from ngym.cli import main
from ngym.cli.list import render_available
from ngym.examples import dataset_row, read_example_rollouts, read_jsonl, recorded_tool_calls


@pytest.mark.parametrize(
    ("rule", "rewards", "state", "expected"),
    [
        ("last", [0.1, None, 0.5], None, 0.5),
        ("sum", [0.1, None, 0.5], None, 0.6),
        ("sum", [-20.0, 15.0], None, -5.0),  # passed through unscaled, as the environment computed it
        ("state:total", [], {"total": 3}, 3.0),
    ],
)
def test_reward_rules(rule: str, rewards: list[float | None], state: dict[str, int] | None, expected: float) -> None:
    assert episode_reward(rule, rewards, state) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("rule", "rewards", "state", "why"),
    [
        ("last", [], None, "no step was taken"),
        ("last", [1.0, None], None, "last step's observation carries no reward"),
        ("sum", [None, None], None, "no step's observation carried a reward"),
        ("state:total", [1.0], {"total": "high"}, "no finite number 'total'"),
        ("state:total", [1.0], {"total": float("nan")}, "no finite number"),
        ("state:total", [1.0], {"total": True}, "no finite number"),
    ],
)
def test_no_reward_is_never_a_silent_zero(
    rule: str, rewards: list[float | None], state: dict[str, object] | None, why: str
) -> None:
    with pytest.raises(NoReward, match=why):
        episode_reward(rule, rewards, state)


def test_unknown_rule_names_the_rules() -> None:
    with pytest.raises(ValueError, match="last, sum, state:<field>"):
        check_rule("mean")
    with pytest.raises(ValueError):
        OpenEnvConfig(reward_rule="state:")


def test_ws_url() -> None:
    assert ws_url("http://h:1") == "ws://h:1/ws"
    assert ws_url("https://h/") == "wss://h/ws"
    assert ws_url("ws://h:1/ws") == "ws://h:1/ws"


def test_domain_from_option_yaml_or_keywords() -> None:
    assert _domain("Safety", None, {}, "x") == "safety"
    assert _domain(None, "games", {}, "x") == "games"
    assert _domain(None, None, {"keywords": ["openenv", "safety", "dipg"]}, "x") == "safety"
    with pytest.raises(OpenEnvInstallError, match="give --domain"):
        _domain(None, None, {"keywords": ["openenv"]}, "x")
    with pytest.raises(OpenEnvInstallError, match="several"):
        _domain(None, None, {"keywords": ["math", "coding"]}, "x")
    with pytest.raises(OpenEnvInstallError, match="invalid domain 'cooking'"):
        _domain("cooking", None, {}, "x")


def test_openenv_is_an_install_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """``openenv:`` reaches this plugin's install flow through the install-source hook; nothing else claims it."""
    from ngym.plugins.sources import install_sources

    sources = install_sources()
    source = sources.get("openenv")
    assert source is not None and source.uninstall is None  # its environments are pip distributions
    assert sources.for_source("openenv:openenv-dipg-safety") is source
    assert sources.for_source("openenv-dipg-safety") is None  # a plain pip package
    calls: list[tuple[str, dict[str, object]]] = []
    monkeypatch.setattr("ngym_openenv.install.install_source", lambda text, **kw: calls.append((text, kw)))
    source.install("openenv:x", as_name=None, domain="games", options={}, replace=False, verbose=False, echo=print)
    assert calls and calls[0][0] == "openenv:x" and calls[0][1]["domain"] == "games"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["openenv:", "--domain", "games"], "give a source"),
        (["openenv:x", "-o", "colour=red"], "unknown option 'colour'"),
        (["openenv:x", "-o", "reward_rule=mean"], "unknown reward rule 'mean'"),
        (["openenv:x", "-o", "python=/no/such/python"], "no such interpreter"),
        (["openenv:x", "-o", "oops"], "expected KEY=VALUE"),
        (["openenv:x", "ngym-redis"], "separate commands"),
        (["ngym-redis", "--domain", "games"], "apply to PREFIX:SOURCE installs"),
        (["openenv:x", "--as", "bad name"], "a name is letters"),
    ],
)
def test_install_errors_are_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["install", *args])
    out = capsys.readouterr()
    assert exit_info.value.code == 2, out
    assert message in out.err and "Traceback" not in out.err


def test_a_file_is_not_a_source(tmp_path: object) -> None:
    with pytest.raises(OpenEnvInstallError, match="a folder with an openenv.yaml"):
        prepare(__file__, domain="games", echo=lambda _: None)


def test_folder_without_openenv_yaml(tmp_path: object) -> None:
    import pathlib

    with pytest.raises(OpenEnvInstallError, match="no openenv.yaml"):
        prepare(str(pathlib.Path(__file__).parent), domain="games", echo=lambda _: None)


def test_available_rows_render(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [
        {
            "name": "openenv-dipg-safety",
            "domain": "safety",
            "version": "0.1.67",
            "installed_as": None,
            "reachable": True,
            "description": "DIPG Safety Environment for OpenEnv",
        }
    ]
    monkeypatch.setattr(catalog, "available", lambda: rows)
    text = render_available("openenv", as_json=False)
    assert "openenv-dipg-safety  safety  0.1.67" in text and "install one: ngym install openenv:NAME" in text


def test_available_lists_the_environment_folders_of_an_openenv_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenEnv's own environments are folders of its repository, not distributions: with NGYM_OPENENV_ENVS set,
    ``--available`` lists each (with openenv.yaml), its domain where openenv.yaml or the keywords say one."""
    envs = tmp_path / "envs"
    for name, yaml_text, project in (
        ("declares_env", "name: declares\ndomain: games\nversion: 0.2.0\n", None),
        ("keyworded_env", "name: keyworded\n", '[project]\nname = "k"\nversion = "1.0"\nkeywords = ["Coding"]\n'),
        ("maze_env", "name: maze_env\n", '[project]\nname = "m"\ndescription = "A maze"\n'),
    ):
        (envs / name).mkdir(parents=True)
        (envs / name / "openenv.yaml").write_text(yaml_text)
        if project:
            (envs / name / "pyproject.toml").write_text(project)
    (envs / "not_an_env").mkdir()
    monkeypatch.setenv(catalog.FOLDERS_ENV, str(envs))
    rows = {Path(r["name"]).name: r for r in catalog.folder_rows({})}
    assert sorted(rows) == ["declares_env", "keyworded_env", "maze_env"]
    assert rows["declares_env"]["domain"] == "games" and rows["declares_env"]["version"] == "0.2.0"
    assert rows["keyworded_env"]["domain"] == "coding" and rows["keyworded_env"]["version"] == "1.0"
    assert rows["maze_env"]["domain"] is None
    assert rows["maze_env"]["description"] == "needs --domain (e.g. games); A maze"  # OpenEnv's own maze_env
    monkeypatch.setenv(catalog.FOLDERS_ENV, str(tmp_path / "nowhere"))
    (missing,) = catalog.folder_rows({})
    assert missing["reachable"] is False and "no such folder" in missing["description"]


def test_a_taken_name_is_refused() -> None:
    with pytest.raises(OpenEnvInstallError, match="already installed by ngym-example-single-tool-call"):
        check_name_free("example_single_tool_call")
    check_name_free("no_such_environment_anywhere")


def test_available_asks_the_package_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real index (pip's own, reachable wherever ngym installs from it): what it says of each candidate."""
    monkeypatch.setenv(catalog.CATALOG_ENV, "openenv-no-such-environment-ngym-test")
    rows = {row["name"]: row for row in catalog.available()}
    dipg = rows["openenv-dipg-safety"]
    assert dipg["reachable"] is True and dipg["domain"] == "safety" and dipg["version"]
    missing = rows["openenv-no-such-environment-ngym-test"]
    assert missing["reachable"] is False and "not on the index (HTTP 404)" in missing["description"]


# ---- example data made at install (ngym_openenv.examples) -------------------------------------------------


def test_example_action_from_what_the_schema_declares() -> None:
    # grid_world's Action (pydantic's schema: an enum behind $ref), DIPG's and the template's (plain strings)
    grid = {
        "$defs": {"MoveAction": {"enum": ["UP", "DOWN", "LEFT", "RIGHT"], "type": "string"}},
        "properties": {
            "metadata": {"type": "object", "additionalProperties": True},
            "action": {"$ref": "#/$defs/MoveAction", "description": "The direction to move the agent."},
        },
        "required": ["action"],
        "type": "object",
    }
    assert example_action(grid) == {"action": "UP"}  # optional fields (metadata) are left out
    assert example_action({"properties": {"message": {"type": "string"}}, "required": ["message"]}) == {
        "message": "example"
    }
    nested = {
        "type": "object",
        "required": ["n", "ok", "when", "items", "opt", "pick"],
        "properties": {
            "n": {"type": "integer", "minimum": 3},
            "ok": {"type": "boolean"},
            "when": {"type": "string", "default": "now"},
            "items": {"type": "array"},
            "opt": {"anyOf": [{"type": "null"}, {"type": "number"}]},
            "pick": {"type": "string", "examples": ["first"]},
        },
    }
    assert example_action(nested) == {"n": 3, "ok": False, "when": "now", "items": [], "opt": 0.0, "pick": "first"}
    assert example_action({"$ref": "#/$defs/Self", "$defs": {"Self": {"$ref": "#/$defs/Self"}}}) == "example"


def test_example_row_and_recording_use_the_environment_tools() -> None:
    step_env = Manifest(
        name="grid", source="x", domain="games", description="A grid.", action_schema={"type": "object"}
    )
    row = example_row(step_env, {"x": 0, "y": 0, "message": "Welcome"})
    params = row["responses_create_params"]
    assert [t["name"] for t in params["tools"]] == ["step"] and params["tools"][0]["parameters"] == {"type": "object"}
    assert '"message": "Welcome"' in params["input"][0]["content"] and "A grid." in params["input"][0]["content"]
    assert row["seed"] == EXAMPLE_SEED

    mcp_env = step_env.model_copy(
        update={"tool_mode": "mcp", "tools": [ToolSpec(name="add", input_schema={"type": "object"})]}
    )
    assert tool_name_and_schema(mcp_env)[0] == "add"
    line = recorded_rollout(example_row(mcp_env, {}), "add", {"n": 1}, {"reward": 0.1}, 0.1)
    assert dataset_row(line) == example_row(mcp_env, {})
    assert [c.name for c in recorded_tool_calls(line["response"])] == ["add"] and line["reward"] == 0.1
    assert "reward" not in recorded_rollout(row, "step", {}, {}, None)  # an unrepeatable episode promises none


def test_examples_are_written_where_the_commands_look(tmp_path: Path) -> None:
    manifest = Manifest(name="grid", source="x", domain="games")
    manifest.example_rows = [example_row(manifest, {})]
    manifest.example_rollouts = [recorded_rollout(manifest.example_rows[0], "step", {}, {}, 0.5)]
    write_example_data(manifest, tmp_path / "data")
    assert read_jsonl(tmp_path / "data" / "example.jsonl") == manifest.example_rows
    assert read_example_rollouts(tmp_path / "data" / "example_rollouts.jsonl")[0]["reward"] == 0.5
    manifest.save(tmp_path / "manifest.json")  # the examples live in the data files only
    assert load_manifest(tmp_path / "manifest.json").example_rollouts == []


def test_given_examples_must_be_recorded_rollouts(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"responses_create_params": {"input": "x"}}\n')
    with pytest.raises(OpenEnvInstallError, match=r"bad.jsonl:1: a line is a dataset row .* plus its recorded"):
        prepare("http://127.0.0.1:9", as_name="x", domain="games", options={"examples": str(bad)}, echo=print)
    with pytest.raises(OpenEnvInstallError, match="examples=.*data file not found"):
        prepare("http://127.0.0.1:9", options={"examples": str(tmp_path / "none.jsonl")}, echo=print)


# ---- folders: what to install, as OpenEnv's Dockerfiles do ------------------------------------------------


def test_a_folder_whose_project_refuses_this_python_installs_its_server_requirements(tmp_path: Path) -> None:
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "requirements.txt").write_text("fastapi\ngymnasium>=0.29.0\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "g"\nrequires-python = ">=3.99"\n')
    said: list[str] = []
    assert folder_requirements(tmp_path, None, said.append) == [
        "-r",
        str(tmp_path / "server" / "requirements.txt"),
        "openenv",  # OpenEnv's images have it in the base; a virtualenv of its own needs it named
    ]
    assert "requires Python >=3.99" in said[0]
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "g"\nrequires-python = ">=3.10"\n')
    assert folder_requirements(tmp_path, None, said.append) == [str(tmp_path)]
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "server" / "requirements.txt").write_text("openenv-core>=0.2\n")
    assert folder_requirements(tmp_path, None, said.append) == ["-r", str(tmp_path / "server" / "requirements.txt")]


def test_a_failed_pip_install_is_said_in_one_line() -> None:
    """OpenEnv's dm_control_env and unity_env name OpenEnv by git URL (no route to GitHub here): install printed 15
    lines of pip's output; the reason is now one line (pip's output goes to a file the line names)."""
    from ngym_openenv.environment_venv import pip_reason

    git = (
        "  Cloning https://github.com/huggingface/OpenEnv.git to /tmp/pip-install-x/openenv\n"
        "  fatal: unable to access 'https://github.com/huggingface/OpenEnv.git/': Could not resolve host: github.com\n"
        "  error: subprocess-exited-with-error\n"
    )
    assert pip_reason(git) == "it needs https://github.com/huggingface/OpenEnv.git/, which cannot be reached from here"
    index = (
        "ERROR: Could not find a version that satisfies the requirement mlagents==0.30 (from versions: none)\n"
        "ERROR: No matching distribution found for mlagents==0.30\n"
    )
    assert pip_reason(index) == "mlagents==0.30 is not on the package index for this Python/platform"
    assert pip_reason("Collecting x\nERROR: something else went wrong\nmore\n") == "something else went wrong"
    assert "\n" not in pip_reason(git + index)


def test_an_app_that_fails_to_import_is_said_in_one_line(openenv_python: str, tmp_path: Path) -> None:
    """OpenEnv's textarena_env fails at import here (nltk data it cannot download): install printed the last 15
    lines of the traceback, which held neither the exception's type nor its first line. Now: one line."""
    folder = tmp_path / "needs_data_env"
    (folder / "server").mkdir(parents=True)
    (folder / "openenv.yaml").write_text("name: needs_data\napp: server.app:app\n")
    (folder / "server" / "__init__.py").write_text("")
    banner = "*" * 40
    text = f"\\n{banner}\\n  Resource words not found.\\n  Please download it.\\n{banner}"
    (folder / "server" / "app.py").write_text(f'raise LookupError("{text}")\n')
    with pytest.raises(OpenEnvInstallError) as raised:  # the probe install runs (prepare would pip-install first)
        environment_venv.probe(openenv_python, {"app": "server.app:app", "app_dir": str(folder)})
    message = str(raised.value)
    assert "\n" not in message, message
    assert message.startswith(
        "the environment's app server.app:app could not be imported: LookupError: Resource words not found. "
        "Please download it. (traceback: "
    ), message
    log = Path(message.rsplit("(traceback: ", 1)[1].rstrip(")"))
    assert "Traceback" in log.read_text() and "LookupError" in log.read_text()


def test_a_server_that_never_answers_is_one_line_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenEnv's git_env waits for its Gitea server: install said only "cannot reach the OpenEnv server: timed out"."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)  # accepts connections (the kernel does) and never answers
    monkeypatch.setattr(install_server, "ASK_TIMEOUT", 0.5)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(OpenEnvInstallError) as raised:
            install_server.ask_server(url)
    finally:
        listener.close()
    assert str(raised.value) == (
        f"the OpenEnv server at {url} did not answer /schema within 0.5 s (is it waiting for a service it needs, "
        "one it cannot reach from here?)"
    )


def test_an_app_without_openenvs_ws_route_is_one_line_saying_so() -> None:
    """OpenEnv's calendar_env registers only HTTP /reset, /step and /state: install said "server rejected WebSocket
    connection: HTTP 403"."""
    from fastapi import FastAPI

    from ngym.rollout.thread_server import serve_app_in_thread

    app = FastAPI()

    @app.post("/reset")
    def reset() -> dict[str, str]:
        return {}

    with serve_app_in_thread(app) as url, pytest.raises(OpenEnvInstallError) as raised:
        install_server.ask_server(url)
    message = str(raised.value)
    assert "has no OpenEnv /ws route (HTTP 403)" in message and "\n" not in message, message


def test_a_folder_whose_project_leaves_openenv_out_gets_it(tmp_path: Path) -> None:
    """OpenEnv's openapp_env does not list openenv (its Dockerfile installs it): the import failed in its venv."""
    said: list[str] = []
    for dependencies, added in (
        ('["openenv[core]>=0.2.2", "x"]', False),
        ('["openenv-core>=0.2"]', False),
        ('["openenv[core] @ git+https://example.invalid/OpenEnv.git"]', False),
        ('["openenvx", "fastapi"]', True),
        ("[]", True),
    ):
        (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "e"\ndependencies = {dependencies}\n')
        wanted = [str(tmp_path), "openenv"] if added else [str(tmp_path)]
        assert environment_venv.folder_requirements(tmp_path, None, said.append) == wanted, dependencies


def test_an_app_named_from_the_repository_root_is_found() -> None:
    """OpenEnv's agent_world_model_env names its app `envs.agent_world_model_env.server.app:app` (from the repo's
    root): the import failed with "No module named 'envs'". The copy is now laid out under envs/."""
    named = install_module._named_from_above
    assert named("envs.agent_world_model_env.server.app:app", "agent_world_model_env") == ["envs"]
    assert named("a.b.my_env.server.app:app", "my_env") == ["a", "b"]
    assert named("server.app:app", "my_env") == [] and named("my_env.server.app:app", "my_env") == []
