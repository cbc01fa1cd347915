"""Installing NeMo Gym environments: reading a folder, the generated project, the wheel catalogue, clashes,
``ngym test`` and ``--model-url``. Environments here are small NeMo-shaped folders written by the tests; the
real ones (from the nemo-gym wheel) are exercised by ``make nemo-ci`` and ``make nemo-envs``."""

from __future__ import annotations

import json
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from ngym_nemo_gym.catalogue import wheel as nemo_wheel
from ngym_nemo_gym.catalogue.folder import (
    COMPAT_DISTRIBUTION,
    NemoEnvironmentError,
    distribution_name,
    read_environment,
)
from ngym_nemo_gym.catalogue.install import NameClashError, install_nemo_environment, is_nemo_source
from ngym_nemo_gym.catalogue.package import build_project, render_pyproject

from ngym.cli import cli
from ngym.envtest import locate, run_tests
from ngym.errors import ConfigError
from ngym.model_urls import (
    MODEL_URLS_ENV,
    export_global_config,
    export_model_instances,
    export_model_urls,
    parse_model_urls,
)

APP = """
class MyServerConfig:
    pass


class MyServer:
    pass


if __name__ == "__main__":
    MyServer.run_webserver()
"""
CONFIG = """config_paths:
  - responses_api_models/openai_model/configs/openai_model.yaml
{name}:
  resources_servers:
    {name}:
      entrypoint: app.py
      domain: {domain}
      description: A test environment
      judge_model_server:
        type: responses_api_models
        name: judge
{name}_agent:
  responses_api_agents:
    simple_agent:
      entrypoint: app.py
"""


def make_env(
    root: Path,
    name: str = "my_env",
    *,
    requirements: str = "-e nemo-gym[dev] @ ../../\nnumpy>=1.26\n",
    domain: str = "math",
    app: str = APP,
) -> Path:
    folder = root / "resources_servers" / name
    (folder / "configs").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "app.py").write_text(app)
    (folder / "configs" / f"{name}.yaml").write_text(CONFIG.format(name=name, domain=domain))
    (folder / "data" / "example.jsonl").write_text("{}\n")
    (folder / "requirements.txt").write_text(requirements)
    return folder


def test_read_environment_names_the_server_domain_and_requirements_without_nemo_gym(tmp_path: Path) -> None:
    folder = make_env(
        tmp_path, requirements="-e nemo-gym[dev] @ ../../\nnumpy>=1.26  # arrays\n\n-e ./vendored[fast]\n"
    )
    env = read_environment(folder)
    assert (env.name, env.domain, env.server_class, env.target) == (
        "my_env",
        "math",
        "MyServer",
        "resources_servers.my_env.app:MyServer",
    )
    assert env.requirements[0] == COMPAT_DISTRIBUTION
    assert "numpy>=1.26" in env.requirements and "pytest>=8" in env.requirements  # [dev] → the test tools
    assert not any(r.startswith(("nemo-gym", "nemo_gym")) for r in env.requirements)
    assert env.pip_lines == [str(folder / "vendored") + "[fast]"]  # relative to the environment, made absolute


def test_self_reference_by_path_only_is_dropped_too(tmp_path: Path) -> None:
    env = read_environment(make_env(tmp_path, requirements="-e ../../\nscipy\n"))
    assert env.requirements == [COMPAT_DISTRIBUTION, "scipy"] and env.pip_lines == []


def test_libraries_nemo_gym_brings_are_added_when_imported_but_not_declared(tmp_path: Path) -> None:
    """Under NeMo Gym an environment gets Ray and numpy from nemo-gym's own install; ngym adds what it imports."""
    folder = make_env(tmp_path, requirements="-e nemo-gym @ ../../\nnumpy==2.2.6\n")
    (folder / "runner.py").write_text("import ray\nimport numpy as np\nfrom PIL import Image\n")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_app.py").write_text("from tqdm import tqdm\nfrom .docker import x\nimport docker\n")
    (folder / "tests" / "docker.py").write_text("x = 1\n")  # its own module named docker: not the library
    env = read_environment(folder)
    # scipy because numpy is imported: NeMo Gym's install brings them together
    assert env.requirements == [
        COMPAT_DISTRIBUTION,
        "numpy==2.2.6",
        "ray>=2.58",
        "scipy>=1.14.1",
        "tqdm>=4.66",
        "pillow>=10",
    ]


def test_a_folder_without_main_block_is_a_library_without_entry_point(tmp_path: Path) -> None:
    env = read_environment(make_env(tmp_path, app="class Base:\n    pass\n"))
    assert env.server_class is None and env.target is None
    assert "ngym.resources_servers" not in render_pyproject(env)


def test_siblings_are_the_known_environments_it_imports(tmp_path: Path) -> None:
    make_env(tmp_path, "base_env")
    app = "from resources_servers.base_env.base import Base\nimport resources_servers.unknown\n" + APP
    env = read_environment(make_env(tmp_path, "child", app=app), {"base_env", "child"})
    assert env.siblings == ["base_env"]
    pyproject = tomllib.loads(render_pyproject(env))
    assert distribution_name("base_env") in pyproject["project"]["dependencies"]


def test_siblings_named_only_in_comments_or_docstrings_are_not_installed(tmp_path: Path) -> None:
    """NeMo's sec_local_index mentions ``resources_servers/finance_agent_v2/tests/...`` in docstrings only: taking it
    for a sibling made installing finance_sec_search clone finance_agent_v2's git requirement (no internet)."""
    for name in ("prose_only", "data_reader", "dynamic", "base_env"):
        make_env(tmp_path, name)
    app = (
        '"""Compare with resources_servers/prose_only/app.py."""\n'
        "# see resources_servers.prose_only too\n"
        "import importlib\n"
        "from resources_servers.base_env import base\n"
        "ROWS = 'resources_servers/data_reader/data/example.jsonl'\n"
        "\n"
        "def load():\n"
        '    """Like resources_servers.prose_only does."""\n'
        "    return importlib.import_module('resources_servers.dynamic.app')\n" + APP
    )
    known = {"prose_only", "data_reader", "dynamic", "base_env", "child"}
    env = read_environment(make_env(tmp_path, "child", app=app), known)
    assert env.siblings == ["base_env", "data_reader", "dynamic"]


def test_not_an_environment_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NemoEnvironmentError, match="not a NeMo Gym environment"):
        read_environment(tmp_path)
    with pytest.raises(NemoEnvironmentError, match="not a folder"):
        read_environment(tmp_path / "missing")


def test_generated_project_installs_the_folder_as_resources_servers_name(tmp_path: Path) -> None:
    env = read_environment(make_env(tmp_path))
    project = build_project(env, tmp_path / "build", ngym_name="renamed")
    pyproject = tomllib.loads((project / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "ngym-nemo-my-env"
    assert pyproject["project"]["entry-points"]["ngym.resources_servers"] == {
        "renamed": "resources_servers.my_env._ngym_entry:MyServer"
    }
    shim = (project / "resources_servers" / "my_env" / "_ngym_entry.py").read_text()
    assert "sys.path.insert(0, _FOLDER)" in shim and "from resources_servers.my_env.app import MyServer" in shim
    assert pyproject["tool"]["setuptools"]["packages"] == ["resources_servers.my_env"]
    assert (project / "resources_servers" / "my_env" / "data" / "example.jsonl").is_file()
    assert not (project / "resources_servers" / "__init__.py").exists()  # a namespace shared by all of them


def test_is_nemo_source(tmp_path: Path) -> None:
    folder = make_env(tmp_path)
    assert is_nemo_source("nemo-gym:anything") and is_nemo_source(str(folder))
    assert not is_nemo_source("ngym-redis") and not is_nemo_source(str(tmp_path))


def test_a_name_clash_with_an_installed_environment_is_refused_naming_both(tmp_path: Path) -> None:
    """ngym's own built-in example_single_tool_call is installed in the test environment."""
    folder = make_env(tmp_path, "example_single_tool_call", domain="agent")
    with pytest.raises(NameClashError) as caught:
        install_nemo_environment(str(folder), echo=lambda line: None)
    message = str(caught.value)
    assert "ngym-example-single-tool-call" in message and "--as NAME" in message and "--replace" in message


def make_wheel(folder: Path) -> Path:
    """A stand-in nemo-gym wheel holding two environments (the catalogue reads only its zip directory)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nemo_gym-0.7.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("resources_servers/alpha/app.py", 'CONFIG = "benchmarks/alpha/config.yaml"\n' + APP)
        zf.writestr("resources_servers/alpha/configs/other.yaml", "x:\n  responses_api_agents:\n    a: {}\n")
        zf.writestr("resources_servers/alpha/configs/alpha.yaml", CONFIG.format(name="alpha", domain="games"))
        zf.writestr("resources_servers/alpha/tests/test_app.py", "def test_ok():\n    pass\n")
        zf.writestr("resources_servers/alpha/data/example_rollouts.jsonl", "{}\n")
        zf.writestr("resources_servers/beta/app.py", APP)
        zf.writestr("benchmarks/alpha/config.yaml", "judge: x\n")
        zf.writestr("benchmarks/unrelated/config.yaml", "judge: y\n")
        zf.writestr("nemo_gym/__init__.py", "")
    return path


def test_catalogue_reads_domains_from_the_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nemo_wheel.WHEEL_DIR_ENV, str(tmp_path / "wheels"))
    make_wheel(tmp_path / "wheels")
    rows = {r.name: r for r in nemo_wheel.available_environments()}
    assert set(rows) == {"alpha", "beta"}
    assert (rows["alpha"].domain, rows["alpha"].config, rows["alpha"].has_tests) == (
        "games",
        "configs/alpha.yaml",
        True,
    )
    assert rows["beta"].domain is None and not rows["beta"].has_example_rollouts
    result = CliRunner().invoke(cli, ["list", "--available", "nemo-gym", "--json"])
    assert result.exit_code == 0, result.output
    assert [(r["name"], r["domain"], r["installed_as"]) for r in json.loads(result.output)] == [
        ("alpha", "games", None),
        ("beta", None, None),
    ]
    with pytest.raises(nemo_wheel.NemoGymSourceError, match="no environment 'gamma'"):
        nemo_wheel.extract_environment("gamma", tmp_path / "out")
    folder = nemo_wheel.extract_environment("alpha", tmp_path / "out")
    assert (folder / "tests" / "test_app.py").is_file()
    env = read_environment(folder)  # benchmarks/alpha/ comes along: some environments read it from NeMo's root
    assert env.companions == ["benchmarks/alpha"]
    assert not (tmp_path / "out" / "benchmarks" / "unrelated").exists()
    project = build_project(env, tmp_path / "build")
    assert (project / "benchmarks" / "alpha" / "config.yaml").is_file()
    assert tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"] == [
        "resources_servers.alpha",
        "benchmarks.alpha",
    ]


def test_install_refuses_as_for_ordinary_packages() -> None:
    result = CliRunner().invoke(cli, ["install", "ngym-redis", "--as", "x"])
    assert (
        result.exit_code == 2
        and "--as, --domain, --option and --replace apply to PREFIX:SOURCE installs" in result.output
    )


def test_model_urls_parse_merge_and_reject_bad_values() -> None:
    environ = {MODEL_URLS_ENV: json.dumps({"judge": "http://old:1", "sim": "http://sim:2"})}
    merged = export_model_urls(["judge=http://127.0.0.1:9000/v1/"], environ)
    assert merged == {"judge": "http://127.0.0.1:9000/v1", "sim": "http://sim:2"}
    assert json.loads(environ[MODEL_URLS_ENV]) == merged
    with pytest.raises(ConfigError, match="expected NAME=URL"):
        parse_model_urls(["judge"])
    with pytest.raises(ConfigError, match="not an http"):
        parse_model_urls(["judge=ftp://x"])
    with pytest.raises(ConfigError, match="not JSON"):
        export_model_urls([], {MODEL_URLS_ENV: "{"})


def test_global_config_carries_the_yaml_trees_and_the_model_urls(tmp_path: Path) -> None:
    config = make_env(tmp_path) / "configs" / "my_env.yaml"
    environ: dict[str, str] = {}
    export_global_config([config], environ)
    export_model_instances({"judge": "http://127.0.0.1:9000/v1", "my_env": "http://elsewhere:1"}, environ)
    tree = json.loads(environ["NGYM_NEMO_GLOBAL_CONFIG"])
    assert tree["my_env"]["resources_servers"]["my_env"]["judge_model_server"]["name"] == "judge"
    assert tree["judge"] == {
        "responses_api_models": {
            "openai_model": {"host": "127.0.0.1", "port": 9000, "openai_base_url": "http://127.0.0.1:9000/v1"}
        }
    }


TEST_FILE = """
import asyncio

from app import VALUE
from resources_servers.{name}.app import VALUE as SAME


async def test_runs_without_a_decorator():
    await asyncio.sleep(0)
    assert VALUE == SAME == 42
"""


@pytest.mark.parametrize("inside_resources_servers", [True, False])
def test_ngym_test_runs_the_folder_tests_the_gym_env_test_way(tmp_path: Path, inside_resources_servers: bool) -> None:
    root = tmp_path if inside_resources_servers else tmp_path / "elsewhere"
    folder = make_env(root, "my_env", app="VALUE = 42\n") if inside_resources_servers else root / "my_env"
    if not inside_resources_servers:
        folder.mkdir(parents=True)
        (folder / "app.py").write_text("VALUE = 42\n")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_app.py").write_text(TEST_FILE.format(name="my_env"))
    assert (locate(str(folder)).project_root is None) is (not inside_resources_servers)
    assert run_tests(str(folder), ["-q", "-p", "no:randomly"]) == 0
    (folder / "tests" / "test_app.py").write_text("def test_fails():\n    assert False\n")
    assert run_tests(str(folder), ["-q"]) == 1


def test_ngym_test_unknown_name_lists_what_is_installed() -> None:
    result = CliRunner().invoke(cli, ["test", "no_such_environment_here"])
    assert result.exit_code != 0
    assert "no environment or folder named 'no_such_environment_here'" in str(result.exception or result.output)


def test_pytest_runs_with_this_interpreter() -> None:
    from ngym.envtest import pytest_command

    command = pytest_command(["-x"])
    assert command[0] == sys.executable and "asyncio_mode=auto" in command and command[-1] == "-x"


def test_example_rollouts_are_completed_the_way_nemo_reverifies_them(tmp_path: Path) -> None:
    """A NeMo Gym rollout line is a verify response: outputs in, row fields out, nulls in the request."""
    from ngym.examples import read_example_rollouts

    data = tmp_path / "data"
    data.mkdir()
    prompt = {"input": [{"role": "user", "content": "2+2?"}]}
    row = {"responses_create_params": prompt, "id": 7, "expected": "4"}
    line = {
        "responses_create_params": {**prompt, "parallel_tool_calls": None, "tool_choice": None},
        "expected": "4",
        "judge_evaluations": ["an output of verify"],
        "response": {"output": []},
        "reward": 1.0,
    }
    (data / "example.jsonl").write_text(json.dumps(row) + "\n")
    (data / "example_rollouts.jsonl").write_text(json.dumps(line) + "\n")
    [completed] = read_example_rollouts(data / "example_rollouts.jsonl")
    assert completed == {**row, "response": {"output": []}, "reward": 1.0}
    (data / "example.jsonl").unlink()  # no dataset rows: the line itself, nulls dropped
    [alone] = read_example_rollouts(data / "example_rollouts.jsonl")
    assert alone["responses_create_params"] == prompt and alone["judge_evaluations"] == ["an output of verify"]


def test_recorded_rollouts_in_another_order_pair_with_their_own_rows(tmp_path: Path) -> None:
    """NeMo records rollouts in completion order, each message with ``"type": "message"``; dataset rows leave the
    type out. Pairing by position would verify a recording against another row's answer (a silent wrong reward)."""
    from ngym.examples import read_example_rollouts

    data = tmp_path / "data"
    data.mkdir()
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": q}]}, "expected": a} for q, a in
            (("2+2?", "4"), ("3+3?", "6"))]  # fmt: skip
    recorded = {"input": [{"role": "user", "content": "3+3?", "type": "message"}]}
    lines = [
        {"responses_create_params": recorded, "response": {"output": []}, "reward": 1.0},
        # no prompt in common with any row (a materialised prompt): its _ng_task_index names the row
        {"responses_create_params": {"input": "x"}, "_ng_task_index": 0, "response": {"output": []}, "reward": 0.0},
    ]
    (data / "example.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (data / "example_rollouts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    first, second = read_example_rollouts(data / "example_rollouts.jsonl")
    assert first["expected"] == "6" and first["reward"] == 1.0
    assert second["expected"] == "4" and second["reward"] == 0.0


def test_nemo_configs_with_includes_variables_and_environment_servers_load(tmp_path: Path) -> None:
    """NeMo Gym 0.7 configs: `config_paths` includes, top-level variables and `environment_servers` instances
    are not errors; the resources server's fields are read."""
    from ngym.config import environment_config_fields

    config = make_env(tmp_path) / "configs" / "my_env.yaml"
    config.write_text(
        config.read_text()
        + "judge_base_url: null\nmy_env_environment_server:\n  environment_servers:\n    legacy_agent:\n"
        "      entrypoint: app.py\n"
    )
    fields = environment_config_fields(config)
    assert fields["domain"] == "math" and fields["judge_model_server"]["name"] == "judge"


def test_a_failed_pip_says_why_in_one_line() -> None:
    from ngym_nemo_gym.catalogue.install import pip_failure_line

    build = (
        "  × git clone https://github.com/x/y.git did not run successfully.\n  │ exit code: 128\nnote: This error ..."
    )
    assert pip_failure_line(build, 1).startswith("× git clone https://github.com/x/y.git")
    assert pip_failure_line("WARNING: Location x\nERROR: No matching distribution found for z\n", 1) == (
        "ERROR: No matching distribution found for z"
    )
    assert pip_failure_line("note: generic\n", 2) == "exit code 2"


def test_companions_are_found_in_every_form_environments_name_them(tmp_path: Path) -> None:
    folder = tmp_path / "resources_servers" / "env"
    folder.mkdir(parents=True)
    (folder / "app.py").write_text(
        "from benchmarks.dotted.prompts import P\n"
        'CONFIG = "benchmarks/slashed/config.yaml"\n'
        "from responses_api_agents.agent_mod.app import Agent\n"
        'MIRROR = Path(__file__).resolve().parents[2] / "responses_api_agents" / "joined" / "maven_mirror"\n'
        'NOT_A_COMPANION = "see responses_api_agents/readme_only for docs"\n'
    )
    assert nemo_wheel.referenced_companions(folder) == {
        "benchmarks/dotted",
        "benchmarks/slashed",
        "responses_api_agents/agent_mod",
        "responses_api_agents/joined",
    }


def test_runtime_libraries_of_code_templates_and_their_companions_are_added(tmp_path: Path) -> None:
    """nvarc runs a template of model-written Python with its own interpreter: numpy is imported only inside
    that string, and the model's code may import scipy, which NeMo Gym's install always brings with numpy.
    Without them such a row scores 0.0 under ngym and 1.0 under NeMo Gym."""
    from ngym_nemo_gym.catalogue.runtime_deps import undeclared_runtime_requirements

    env = tmp_path / "env"
    env.mkdir()
    (env / "app.py").write_text('TEMPLATE = """\nimport sys\ndef f():\n    import numpy as np\n"""\nimport json\n')
    assert undeclared_runtime_requirements([env], []) == ["scipy>=1.14.1", "numpy>=1.26"]
    assert undeclared_runtime_requirements([env], ["numpy==2.1", "scipy"]) == []
    (env / "app.py").write_text('HELP = "one line: import numpy"\nimport json\n')  # not a code template
    assert undeclared_runtime_requirements([env], []) == []


def test_libraries_imported_by_name_are_added_too(tmp_path: Path) -> None:
    """vibench's template tests ``pytest.importorskip("jinja2")``: without jinja2 they were skipped under ngym
    (silently less tested) while they run under NeMo Gym, whose install brings jinja2."""
    from ngym_nemo_gym.catalogue.runtime_deps import undeclared_runtime_requirements

    env = tmp_path / "env"
    (env / "tests").mkdir(parents=True)
    (env / "tests" / "test_t.py").write_text('import pytest\njinja2 = pytest.importorskip("jinja2")\n')
    (env / "app.py").write_text('import importlib\nrq = importlib.import_module("requests.adapters")\n')
    assert undeclared_runtime_requirements([env], []) == ["jinja2>=3.1", "requests>=2.31"]
    (env / "app.py").write_text("import importlib\nname = 'requests'\nrq = importlib.import_module(name)\n")
    assert undeclared_runtime_requirements([env], []) == ["jinja2>=3.1"]  # a computed name is not guessed


def test_a_sibling_is_built_as_code_only_without_its_requirements_or_entry_point(tmp_path: Path) -> None:
    """toolsandbox imports aviary: aviary's requirements (a git URL) must not come with its code."""
    folder = make_env(
        tmp_path,
        "aviary_like",
        requirements="-e nemo-gym[dev] @ ../../\nhypo @ git+https://example.invalid/hypo.git\n",
        app="import numpy\nfrom resources_servers.other.x import y\n" + APP,
    )
    env = read_environment(folder, {"other"})
    code = tomllib.loads(render_pyproject(env, code_only=True))["project"]
    # what NeMo Gym's own install brings stays: numpy (and scipy, which comes with it there)
    assert code["dependencies"] == [COMPAT_DISTRIBUTION, "scipy>=1.14.1", "numpy>=1.26", "ngym-nemo-other"]
    assert code["keywords"] == ["ngym-nemo-code-only"] and "entry-points" not in code
    full = tomllib.loads(render_pyproject(env))["project"]
    assert "hypo @ git+https://example.invalid/hypo.git" in full["dependencies"] and "keywords" not in full
    project = build_project(env, tmp_path / "build", code_only=True)
    assert not (project / "resources_servers" / "aviary_like" / "_ngym_entry.py").exists()


def test_the_sandbox_extra_brings_the_docker_sdk_the_sandboxes_run_on(tmp_path: Path) -> None:
    """terminal_bench_4 asks for nemo-gym[dev,sandbox]: its Compose sandboxes need the Docker SDK here."""
    env = read_environment(make_env(tmp_path, requirements="-e nemo-gym[dev,sandbox] @ ../../\n"))
    assert f"{COMPAT_DISTRIBUTION}[docker]" in env.requirements and "pytest>=8" in env.requirements
