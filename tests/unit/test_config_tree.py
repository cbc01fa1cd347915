"""NeMo Gym 0.7.0's config semantics, as `ngym run` reads a config: which top-level keys are server instances,
`${...}` / `${oc.env:...}` resolution against the whole tree, includes, overrides and inheritance.

Each YAML mirrors a shape NeMo Gym's own environments ship (agentif's `judge_base_url: null`, legal_agent_bench's
`responses_create_params:`, conversational_tool_use_simulation's `simulator_model: {_copy: policy_model}`,
litmus_agent's `${oc.env:VAR,default}` numbers)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ngym import targets
from ngym.config import instances_from_files
from ngym.config_tree import load_tree
from ngym.errors import ConfigError
from ngym.model_urls import export_global_config, export_model_instances
from ngym.plugins.manager import Origin
from ngym.plugins.registry import ServerEntry

ENV = """
my_env:
  resources_servers:
    my_env:
      entrypoint: app.py
      domain: knowledge
      judge_base_url: ${judge_base_url}
      sandbox_port: ${oc.env:NGYM_TEST_SANDBOX_PORT,6000}
      float_rel_tol: ${oc.env:NGYM_TEST_FLOAT_REL_TOL,1e-6}
      api_key: ${oc.env:NGYM_TEST_API_KEY,''}
      judge_model_server:
        type: responses_api_models
        name: judge_model
judge_model:
  responses_api_models:
    openai_model:
      entrypoint: app.py
      openai_base_url: ${judge_base_url}
      openai_model: ${judge_model_name}
my_env_agent:
  responses_api_agents:
    simple_agent:
      entrypoint: app.py
      model_server:
        type: responses_api_models
        name: policy_model
      datasets:
      - name: example
        jsonl_fpath: resources_servers/my_env/data/example.jsonl
responses_create_params:
  temperature: 1.0
  top_p: 0.95
simulator_model:
  _copy: policy_model
head_server:
  host: 127.0.0.1
  port: 11000
judge_base_url: null
judge_model_name: null
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def served(paths: list[Path], overrides: list[str] | None = None) -> dict:
    (instance,) = [i for i in instances_from_files(paths, overrides or []) if i.server_type == "resources_servers"]
    return instance.fields


def test_only_mappings_with_a_server_type_are_instances(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NGYM_TEST_SANDBOX_PORT", raising=False)
    instances = instances_from_files([write(tmp_path, "env.yaml", ENV)], [])
    # values (judge_base_url: null, responses_create_params, simulator_model without its source) and reserved
    # run settings (head_server) are not instances, and not errors
    assert [(i.name, i.server_type) for i in instances] == [
        ("my_env", "resources_servers"),
        ("judge_model", "responses_api_models"),
        ("my_env_agent", "responses_api_agents"),
    ]


def test_fields_resolve_against_the_tree_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(tmp_path, "env.yaml", ENV)
    monkeypatch.delenv("NGYM_TEST_SANDBOX_PORT", raising=False)
    monkeypatch.delenv("NGYM_TEST_FLOAT_REL_TOL", raising=False)
    fields = served([config])
    # oc.env's default comes back as a string, as under NeMo Gym; the server's config class parses it
    assert (fields["judge_base_url"], fields["sandbox_port"], fields["float_rel_tol"], fields["api_key"]) == (
        None,
        "6000",
        "1e-06",
        "",
    )
    monkeypatch.setenv("NGYM_TEST_SANDBOX_PORT", "7001")
    fields = served([config], ["judge_base_url=http://127.0.0.1:9/v1"])
    assert (fields["sandbox_port"], fields["judge_base_url"]) == ("7001", "http://127.0.0.1:9/v1")
    assert fields["judge_model_server"] == {"type": "responses_api_models", "name": "judge_model"}


def test_an_unresolvable_reference_fails_only_the_server_that_reads_it(tmp_path: Path) -> None:
    # the model instance's ${policy_base_url} is never resolved: ngym does not start it (NeMo Gym resolves a
    # server's config when that server starts)
    text = ENV + "policy_model:\n  responses_api_models:\n    openai_model:\n      entrypoint: app.py\n"
    text += "      openai_base_url: ${policy_base_url}\n"
    assert served([write(tmp_path, "ok.yaml", text)])["judge_base_url"] is None
    broken = write(
        tmp_path, "broken.yaml", ENV.replace("${judge_base_url}\n      sandbox", "${nowhere}\n      sandbox")
    )
    with pytest.raises(
        ConfigError,
        match=r"my_env\.resources_servers\.my_env\.judge_base_url refers to 'nowhere'.*"
        r"nowhere=VALUE",
    ):
        served([broken])
    unset = write(tmp_path, "unset.yaml", ENV.replace("domain: knowledge", "domain: knowledge\n      token: ???"))
    with pytest.raises(ConfigError, match=r"token is unset \('\?\?\?'\)"):
        served([unset])


def test_references_between_instances_and_string_interpolation(tmp_path: Path) -> None:
    text = """
other:
  resources_servers:
    other:
      entrypoint: app.py
      domain: math
      port: 9123
mine:
  resources_servers:
    mine:
      entrypoint: app.py
      domain: math
      other_url: http://127.0.0.1:${other.resources_servers.other.port}/v1
"""
    mine = [i for i in instances_from_files([write(tmp_path, "two.yaml", text)], []) if i.name == "mine"][0]
    assert mine.fields["other_url"] == "http://127.0.0.1:9123/v1"


def test_copy_and_inherit_from(tmp_path: Path) -> None:
    text = (
        ENV
        + """
policy_model:
  responses_api_models:
    openai_model:
      entrypoint: app.py
      openai_base_url: http://policy:1/v1
base_env:
  resources_servers:
    base_impl:
      entrypoint: app.py
      domain: math
      threshold: 0.5
      label: base
child_env:
  _inherit_from: base_env
  resources_servers:
    base_impl:
      label: child
copied: ${copy:base_env}
trimmed:
  _copy: policy_model.responses_api_models.openai_model
  _delete_key: openai_base_url
  label: own
"""
    )
    tree = load_tree([write(tmp_path, "inherit.yaml", text)]).plain()
    # _copy keeps the source; the copy is an instance of its own
    assert tree["simulator_model"] == tree["policy_model"]
    # _inherit_from moves the source under the new name, own keys win
    assert "base_env" not in tree
    assert tree["child_env"]["resources_servers"]["base_impl"] == {
        "entrypoint": "app.py",
        "domain": "math",
        "threshold": 0.5,
        "label": "child",
    }
    assert tree["copied"]["resources_servers"]["base_impl"]["label"] == "base"
    # _delete_key drops inherited keys
    assert tree["trimmed"] == {"entrypoint": "app.py", "label": "own"}


def test_includes_merge_before_the_including_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "responses_api_agents/agent/configs/agent.yaml", "shared_value: from-include\nlimit: 1\n")
    config = write(
        tmp_path,
        "resources_servers/my_env/configs/my_env.yaml",
        "config_paths:\n- responses_api_agents/agent/configs/agent.yaml\n- responses_api_agents/missing.yaml\n"
        + ENV.replace("${judge_base_url}\n      sandbox", "${shared_value}-${limit}\n      sandbox")
        + "limit: 2\n",
    )
    monkeypatch.chdir(Path("/"))  # includes resolve under the folder holding resources_servers/ too
    with caplog.at_level(logging.WARNING, logger="ngym.config_tree"):
        fields = served([config])
    assert fields["judge_base_url"] == "from-include-2"
    assert "responses_api_agents/missing.yaml not found" in caplog.text


def test_later_files_and_overrides_win(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", ENV)
    second = write(tmp_path, "b.yaml", "judge_base_url: http://second/v1\n")
    assert served([first, second])["judge_base_url"] == "http://second/v1"
    assert served([first, second], ["judge_base_url=http://cli/v1"])["judge_base_url"] == "http://cli/v1"
    assert served([first], ["my_env.resources_servers.my_env.sandbox_port=1"])["sandbox_port"] == 1


def test_malformed_instances(tmp_path: Path) -> None:
    # a model instance NeMo Gym would not start (two implementations) is skipped; a resources server is an error
    models = "m:\n  responses_api_models:\n    a: {entrypoint: app.py}\n    b: {entrypoint: app.py}\n"
    assert [i.name for i in instances_from_files([write(tmp_path, "m.yaml", ENV + models)], [])] == [
        "my_env",
        "judge_model",
        "my_env_agent",
    ]
    bad = "r:\n  resources_servers:\n    a: {entrypoint: app.py}\n    b: {entrypoint: app.py}\n"
    with pytest.raises(ConfigError, match=r"r\.resources_servers must map one implementation"):
        instances_from_files([write(tmp_path, "r.yaml", bad)], [])
    both = "x:\n  resources_servers:\n    a: {entrypoint: app.py}\n  responses_api_models:\n    b: {}\n"
    with pytest.raises(ConfigError, match="one server type"):
        instances_from_files([write(tmp_path, "x.yaml", both)], [])


def test_global_config_keeps_interpolations_and_model_urls_point_defined_instances(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    export_global_config([write(tmp_path, "env.yaml", ENV)], environ, overrides=["judge_model_name=gpt"])
    export_model_instances({"judge_model": "http://127.0.0.1:9000/v1"}, environ)
    tree = json.loads(environ["NGYM_NEMO_GLOBAL_CONFIG"])
    # as NeMo Gym hands its servers the tree: ${...} as written (each server resolves what it reads)
    assert tree["my_env"]["resources_servers"]["my_env"]["sandbox_port"] == "${oc.env:NGYM_TEST_SANDBOX_PORT,6000}"
    assert tree["judge_model_name"] == "gpt"
    # --model-url says where a defined instance listens: its host, port and base URL follow
    judge = tree["judge_model"]["responses_api_models"]["openai_model"]
    assert (judge["host"], judge["port"], judge["openai_base_url"]) == ("127.0.0.1", 9000, "http://127.0.0.1:9000/v1")
    assert judge["openai_model"] == "${judge_model_name}"


def test_an_installed_environment_whose_config_needs_a_value_still_resolves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verifif's `judge_base_url: ${policy_base_url}`: NeMo Gym tests and packages it without the value, and
    # refuses to start it; so does ngym (its folder is found, serving it is one clear error)
    folder = tmp_path / "resources_servers" / "needs_value"
    config = write(
        folder,
        "configs/needs_value.yaml",
        ENV.replace("${judge_base_url}\n      sandbox", "${policy_base_url}\n      sandbox"),
    )
    entry = ServerEntry("needs_value", "resources_servers.needs_value.app:Server", Origin("ngym-nemo-needs-value", "1"))
    monkeypatch.setattr(entry, "package_dir", lambda: folder)
    monkeypatch.setattr(entry, "config_file", lambda: config)
    monkeypatch.setattr(targets, "_entry", lambda name: entry)
    environment = targets.installed("needs_value")
    assert environment.folder == folder and environment.fields["domain"] == "knowledge"
    with pytest.raises(ConfigError, match="refers to 'policy_base_url', which no config sets"):
        environment.serve_spec()


PLAIN_CONFIGS = sorted(Path(__file__).resolve().parents[2].glob("resources_servers/*/configs/*.yaml"))
NEMO_SHAPED = """
my_env:
  resources_servers:
    my_env:
      entrypoint: app.py
      domain: agent
      tags: [a, b]
      limits: {cpu: 1.5, retries: 3, strict: true, note: null}
responses_create_params:
  temperature: 0.7
judge_model:
  responses_api_models:
    openai_model: {entrypoint: app.py}
"""


@pytest.mark.parametrize("config", PLAIN_CONFIGS, ids=lambda p: p.parent.parent.name)
def test_a_config_with_nothing_to_resolve_reads_the_same_without_omegaconf(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = load_tree([config])
    fast_instances = instances_from_files([config], [])
    monkeypatch.setattr("ngym.config_tree._needs_omegaconf", lambda data: True)
    slow = load_tree([config])
    assert fast.plain_data and not slow.plain_data  # every built-in's config takes the plain path
    assert fast.plain() == slow.plain()
    assert fast_instances == instances_from_files([config], [])


def test_the_plain_path_is_taken_only_when_omegaconf_has_nothing_to_do(tmp_path: Path) -> None:
    plain = write(tmp_path, "plain.yaml", NEMO_SHAPED)
    assert load_tree([plain]).plain_data
    assert not load_tree([plain], ["my_env.resources_servers.my_env.domain=math"]).plain_data  # an override
    for text in (ENV, "a:\n  b: ???", "a: {_copy: b}\nb: {c: 1}", "a: {1: x}"):
        assert not load_tree([write(tmp_path, "x.yaml", text)]).plain_data, text
    with pytest.raises(ConfigError, match="not a supported primitive type"):  # OmegaConf's check, kept
        load_tree([write(tmp_path, "d.yaml", "a: {b: 2026-11-23}")])
    with pytest.raises(ConfigError, match=r"is unset \('\?\?\?'\)"):  # still reported as before
        instances_from_files(
            [write(tmp_path, "m.yaml", "e:\n  resources_servers:\n    e:\n      entrypoint: ???\n")], []
        )
