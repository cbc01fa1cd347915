"""``ngym train verl-tools`` and the schema conversion under it (no verl needed: the config is plain YAML)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from ngym.train.tool_schemas import parameters_schema, tools_from_openapi
from ngym.train.wire import Rollout, reward_of

OPENAPI = {
    "paths": {
        "/seed_session": {"post": {}},
        "/verify": {"post": {}},
        "/close_session": {"post": {}},
        "/aggregate_metrics": {"post": {}},
        "/health": {"get": {}},
        "/lookup": {
            "post": {
                "description": "Look a thing up.",
                "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Lookup"}}}},
            }
        },
    },
    "components": {
        "schemas": {
            "Lookup": {
                "title": "Lookup",
                "type": "object",
                "properties": {
                    "name": {"type": "string", "title": "Name"},
                    "kind": {"$ref": "#/components/schemas/Kind"},
                    "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                },
                "required": ["name"],
            },
            "Kind": {"type": "string", "enum": ["a", "b"]},
        }
    },
}


def test_tool_routes_become_function_schemas_every_property_typed() -> None:
    tools = tools_from_openapi(OPENAPI)
    assert [t["function"]["name"] for t in tools] == ["lookup"]  # protocol routes are never tools
    function = tools[0]["function"]
    assert function["description"] == "Look a thing up."
    assert function["parameters"] == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "limit": {"type": ["integer", "null"]},
        },
        "required": ["name"],
    }


def test_a_body_without_properties_is_an_empty_object() -> None:
    assert parameters_schema(None) == {"type": "object", "properties": {}, "required": []}


def test_masked_or_missing_verify_is_no_reward() -> None:
    assert reward_of({"reward": 0.0, "mask_sample": True, "failure_kind": "session_lost"}) is None
    assert reward_of(None) is None
    assert reward_of({"reward": True}) is None
    assert reward_of({"reward": 0.0}) == 0.0


def test_rollout_pairs_calls_and_outputs_as_nemo_agent_writes_them() -> None:
    rollout = Rollout({"responses_create_params": {"input": "hi", "tools": [{"type": "function", "name": "t"}]}})
    rollout.add_call("t", {"x": 1}, '{"ok": true}')
    rollout.add_message("done")
    response = rollout.response()
    assert [i["type"] for i in response["output"]] == ["function_call", "function_call_output", "message"]
    assert response["output"][0]["arguments"] == '{"x": 1}'
    assert response["output"][0]["call_id"] == response["output"][1]["call_id"]
    assert response["tools"] == [{"type": "function", "name": "t"}] and response["object"] == "response"
    assert Rollout.from_dict(rollout.as_dict()) == rollout


def _ngym(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ngym.cli", *args], capture_output=True, text=True, timeout=120)


def test_verl_tools_of_an_installed_name(tmp_path: Path) -> None:
    out = tmp_path / "tools.yaml"
    done = _ngym("train", "verl-tools", "example_session_state_mgmt", "--url", "http://127.0.0.1:8000", "-o", str(out))
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(out.read_text())
    names = [t["tool_schema"]["function"]["name"] for t in config["tools"]]
    assert sorted(names) == ["get_counter_value", "increment_counter"]
    assert {t["class_name"] for t in config["tools"]} == {"ngym.train.verl.NgymTool"}
    assert {t["config"]["url"] for t in config["tools"]} == {"http://127.0.0.1:8000"}
    assert {t["config"]["type"] for t in config["tools"]} == {"native"}
    # the rows' descriptions win over the route's
    described = {
        t["tool_schema"]["function"]["name"]: t["tool_schema"]["function"]["description"] for t in config["tools"]
    }
    assert described["get_counter_value"] == "Read this session's counter."


def test_verl_tools_bad_input_is_one_line_and_nonzero() -> None:
    for args, words in [
        (["example_single_tool_call"], "--url"),
        (["http://127.0.0.1:9"], "cannot reach"),
        (["no_such_environment_anywhere", "--url", "http://x:1"], "no_such_environment_anywhere"),
        # a misspelt name without --url: the name is what is wrong, not the missing --url
        (["exmaple_single_tool_call"], "did you mean 'example_single_tool_call'"),
        (["example_single_tool_call", "--url", "ftp://x"], "not an http"),
        (["example_single_tool_call", "--url", "http://x:1", "--data", "/nonexistent.jsonl"], "nonexistent"),
    ]:
        done = _ngym("train", "verl-tools", *args)
        assert done.returncode != 0, args
        assert "Traceback" not in done.stderr and words in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
