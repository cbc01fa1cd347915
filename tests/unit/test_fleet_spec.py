"""The fleet file, the global config it becomes, the commands it starts, the head server's routes (no processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from ngym.errors import ConfigError
from ngym.fleet.global_config import build_global_config
from ngym.fleet.head import create_head_app
from ngym.fleet.launch import environment_command, environment_env, server_command, server_env
from ngym.fleet.spec import load_fleet, requirements_key
from ngym.fleet.status import PartStatus, ServerStatus, render
from ngym.redact import take_secret_overrides
from ngym.server.pipeline.traffic import Traffic

FLEET = """
name: demo
head_server: {port: 0}
environments:
  weather: example_single_tool_call
  counter:
    env: example_session_state_mgmt
    workers: 2
    config: {session_ttl_seconds: 60, close_session_after_verify: false}
  mine: {env: ./my_env, requirements: [six==1.16.0]}
  mcqa: nemo-gym:mcqa
servers:
  weather_agent:
    responses_api_agents:
      simple_agent:
        entrypoint: app.py
        resources_server: {type: resources_servers, name: weather}
        model_server: {type: responses_api_models, name: policy_model}
    launch: {python: /nemo/bin/python, dir: /nemo/simple_agent}
  policy_model:
    responses_api_models: {replay: {}}
    launch: {command: [ngym, replay-model, --host, "{host}", --port, "{port}"]}
  judge:
    responses_api_models: {vllm_model: {host: 10.0.0.5, port: 8000}}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_a_fleet_file_reads_into_environments_and_nemo_shaped_servers(tmp_path: Path) -> None:
    (tmp_path / "my_env").mkdir()
    (tmp_path / "my_env" / "requirements.txt").write_text("# pinned\nattrs==23.1.0\n")
    spec = load_fleet(write(tmp_path, FLEET))
    assert spec.name == "demo" and spec.engine == "local"
    assert spec.environments["weather"].env == "example_single_tool_call"
    assert spec.environments["counter"].workers == 2
    assert spec.environments["weather"].folder(spec.base_dir) is None
    assert spec.environments["mine"].folder(spec.base_dir) == tmp_path / "my_env"
    # what makes its own venv: its lines, its folder's requirements.txt, a NeMo Gym environment to install
    assert spec.environments["weather"].isolation_key(spec.base_dir) == []
    assert spec.environments["mine"].isolation_key(spec.base_dir) == ["six==1.16.0", "attrs==23.1.0"]
    assert spec.environments["mcqa"].isolation_key(spec.base_dir, "mcqa") == ["nemo-gym:mcqa"]
    # named otherwise in the fleet: installed under that name, so it can sit beside a built-in of NeMo's name
    assert spec.environments["mcqa"].isolation_key(spec.base_dir, "quiz") == ["nemo-gym:mcqa --as quiz"]
    agent = spec.servers["weather_agent"]
    assert (agent.server_type, agent.implementation) == ("responses_api_agents", "simple_agent")
    assert agent.launch is not None and agent.launch.dir == "/nemo/simple_agent"
    assert spec.servers["judge"].launch is None
    assert spec.state_dir() == tmp_path / ".ngym-fleet" / "demo"


def test_requirements_key_ignores_order_and_duplicates() -> None:
    assert requirements_key(["a==1", "b==2"]) == requirements_key(["b==2", "a==1", "a==1"])
    assert requirements_key(["a==1"]) != requirements_key(["a==2"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "environments: {w: {env: x, wokers: 2}}",
            "environments.w.wokers: unknown key 'wokers'; did you mean 'workers'?",
        ),
        ("enviroments: {w: x}", "enviroments: unknown key 'enviroments'; did you mean 'environments'?"),
        (
            "environments: {w: {env: x, workers: 0}}",
            "environments.w.workers: Input should be greater than or equal to 1",
        ),
        ("environments: {'1bad': x}", "'1bad' is not a server name"),
        ("environments: {e: 'openenv:openenv-echo'}", "run `ngym install openenv:openenv-echo`, then name it here"),
        ("environments: {e: {env: 'verifiers:./vf.py'}}", "verifiers environments are installed once"),
        (
            "environments: {a: x}\nservers: {a: {responses_api_models: {m: {}}}}",
            "a: named both under environments and servers",
        ),
        ("servers: {m: {models: {x: {}}}}", "server 'm': expected one of resources_servers"),
        ("servers: {m: {responses_api_models: {x: {}}, launch: {python: p}}}", "launch: `python` needs `dir`"),
        ("servers: {m: {responses_api_models: {x: {}}, launch: {python: p, dir: d, command: [c]}}}", "either `python`"),
        (
            "engine: swarm\nenvironments: {a: x}",
            "engine: no fleet engine 'swarm' (engines: local, compose, ray, kubernetes)",
        ),
        ("name: x", "the fleet has no environments and no servers"),
        ("- a\n- b", "a fleet file is a mapping"),
        ("environments: {a: [", "not valid YAML"),
    ],
)
def test_a_bad_fleet_file_is_one_error_naming_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_fleet(write(tmp_path, text))
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path / "fleet.yaml"))


def test_a_missing_fleet_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such fleet file"):
        load_fleet(tmp_path / "nope.yaml")


def test_the_global_config_names_every_server_where_it_listens_without_placeholders(tmp_path: Path) -> None:
    (tmp_path / "my_env").mkdir()
    spec = load_fleet(write(tmp_path, FLEET))
    addresses = {name: ("127.0.0.1", 9000 + i) for i, name in enumerate([*spec.environments, *spec.servers])}
    config = build_global_config(spec, ("127.0.0.1", 11000), addresses, {"weather": "agent", "mine": "math"})
    assert config["head_server"] == {"host": "127.0.0.1", "port": 11000}
    assert config["dry_run"] is False  # NeMo Gym's child servers index it directly
    assert config["weather"] == {
        "resources_servers": {"example_single_tool_call": {"host": "127.0.0.1", "port": 9000, "domain": "agent"}}
    }
    assert config["mine"] == {"resources_servers": {"mine": {"host": "127.0.0.1", "port": 9002, "domain": "math"}}}
    assert config["mcqa"] == {"resources_servers": {"mcqa": {"host": "127.0.0.1", "port": 9003}}}
    for name in spec.environments:  # served, not launched by NeMo Gym: no entrypoint to fake
        assert "entrypoint" not in json.dumps(config[name])
    agent = config["weather_agent"]["responses_api_agents"]["simple_agent"]
    assert agent["resources_server"] == {"type": "resources_servers", "name": "weather"}
    assert (agent["host"], agent["port"]) == ("127.0.0.1", 9004)
    assert "launch" not in json.dumps(config)


def test_each_environment_is_one_ngym_run_unit(tmp_path: Path) -> None:
    (tmp_path / "my_env").mkdir()
    spec = load_fleet(write(tmp_path, FLEET))
    counter = environment_command(spec, spec.environments["counter"], "127.0.0.1", 9001)
    # -P: the unit imports nothing from the folder `ngym up` ran in (a checkout's ngym/, a resources_servers/)
    assert counter[:6] == [sys.executable, "-P", "-m", "ngym.cli", "run", "example_session_state_mgmt"]
    assert counter[6:] == [
        "--workers", "2", "session_ttl_seconds=60", "close_session_after_verify=false",
        "--host", "127.0.0.1", "--port", "9001",
    ]  # fmt: skip
    mine = environment_command(spec, spec.environments["mine"], "0.0.0.0", 9002, python="/venv/bin/python")
    assert mine[0] == "/venv/bin/python" and mine[5] == str(tmp_path / "my_env") and "--workers" not in mine
    assert environment_command(spec, spec.environments["mcqa"], "h", 1, name="mcqa")[5] == "mcqa"
    assert environment_command(spec, spec.environments["mcqa"], "h", 1, name="quiz")[5] == "quiz"


def test_servers_start_as_nemo_gym_starts_them_or_by_their_command(tmp_path: Path) -> None:
    (tmp_path / "my_env").mkdir()
    spec = load_fleet(write(tmp_path, FLEET))
    assert server_command(spec.servers["weather_agent"], "h", 5, tmp_path) == (
        ["/nemo/bin/python", "app.py"],
        Path("/nemo/simple_agent"),
    )
    assert server_command(spec.servers["policy_model"], "127.0.0.1", 8123, tmp_path) == (
        ["ngym", "replay-model", "--host", "127.0.0.1", "--port", "8123"],
        tmp_path,
    )
    env = server_env("a: 1\n", "weather_agent")
    assert env["NEMO_GYM_CONFIG_DICT"] == "a: 1\n" and env["NEMO_GYM_CONFIG_PATH"] == "weather_agent"


def test_the_head_server_serves_the_config_as_nemo_gym_reads_it(tmp_path: Path) -> None:
    config, instances = tmp_path / "global_config.yaml", tmp_path / "instances.json"
    client = TestClient(create_head_app(config, instances))
    assert client.get("/health").status_code == 503  # not written yet: starting
    assert client.get("/global_config_dict_yaml").status_code == 503
    config.write_text("head_server: {host: 127.0.0.1, port: 11000}\nweather: {resources_servers: {w: {port: 1}}}\n")
    instances.write_text('[{"name": "weather"}]')
    assert client.get("/health").json() == {"status": "ok"}
    # NeMo Gym's ServerClient: json.loads(body) is the YAML text, which OmegaConf.create parses
    text = json.loads(client.get("/global_config_dict_yaml").content)
    assert yaml.safe_load(text)["weather"] == {"resources_servers": {"w": {"port": 1}}}
    assert client.get("/server_instances").json() == [{"name": "weather"}]


def test_traffic_counts_responses_verifies_and_server_errors() -> None:
    traffic = Traffic()
    for path, status in [("/seed_session", 200), ("/verify", 200), ("/verify", 500), ("/verify", 422), ("/x", 503)]:
        traffic.count(path, status)
    assert traffic.as_dict() == {"requests": 5, "verified": 1, "server_errors": 2}


def test_status_renders_one_row_per_server() -> None:
    ok = {"health": "ok", "live_sessions": 3, "rollouts_per_second": 2.5, "verified": 10, "errors": 0}
    rows = [
        ServerStatus(name="weather", kind="environment", url="http://h:1", session_bytes=300, **ok),
        ServerStatus(name="broken", kind="environment", url="http://h:2", health="failed", reason="exited at start: x"),
    ]
    rows[0].parts = [PartStatus(name="w0", health="ok", live_sessions=3, session_bytes=300)]
    lines = render(rows).splitlines()
    assert lines[0].split()[:6] == ["server", "kind", "health", "sessions", "session", "bytes"]
    assert lines[1].split()[:8] == ["weather", "environment", "ok", "3", "300", "2.5", "10", "0"]
    assert lines[2].split() == ["w0", "ok", "3", "300"]  # a worker's (or replica's) own row, under its environment
    assert lines[3].split()[:4] == ["broken", "environment", "failed", "-"] and lines[3].endswith("exited at start: x")


def test_a_fleet_venv_is_keyed_by_the_ngym_it_layers_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cached venv's .pth points at the ngym that made it: another checkout (a CI clone) must not reuse it."""
    from ngym.fleet import isolation

    monkeypatch.setenv(isolation.VENVS_ENV, str(tmp_path))
    monkeypatch.setattr(isolation, "ngym_site_packages", lambda: "/clone-a/.venv/lib/python3.11/site-packages")
    first = isolation.venv_dir(["sortedcontainers==2.4.0"])
    assert isolation.venv_dir(["sortedcontainers==2.4.0"]) == first and first.parent == tmp_path
    monkeypatch.setattr(isolation, "ngym_site_packages", lambda: "/clone-b/.venv/lib/python3.11/site-packages")
    assert isolation.venv_dir(["sortedcontainers==2.4.0"]) != first


def test_an_agent_from_nemo_gyms_install_gets_its_legacy_agent_environment_server(tmp_path: Path) -> None:
    """NeMo Gym's collector needs an environment server naming each agent: the fleet adds NeMo Gym's own."""
    site = tmp_path / "site"
    (site / "environment_servers" / "legacy_agent").mkdir(parents=True)
    agent_dir = site / "responses_api_agents" / "simple_agent"
    agent_dir.mkdir(parents=True)
    agent = {
        "responses_api_agents": {"simple_agent": {"entrypoint": "app.py"}},
        "launch": {"python": "/p", "dir": str(agent_dir)},
    }
    named = {
        "environment_servers": {"legacy_agent": {"agent_server": {"type": "responses_api_agents", "name": "b"}}},
        "launch": {"python": "/p", "dir": str(site / "environment_servers" / "legacy_agent")},
    }
    fleet = {"environments": {"w": "x"}, "servers": {"a": agent, "b": agent, "b_server": named}}
    spec = load_fleet(write(tmp_path, json.dumps(fleet)))
    added = spec.servers["a_env"]
    assert (added.server_type, added.implementation) == ("environment_servers", "legacy_agent")
    assert added.config["agent_server"] == {"type": "responses_api_agents", "name": "a"}
    assert added.launch is not None and added.launch.dir == str(site / "environment_servers" / "legacy_agent")
    assert "b_env" not in spec.servers  # the file names one for b already


def test_secret_overrides_reach_the_unit_by_its_environment_not_its_command_line(tmp_path: Path) -> None:
    fleet = {
        "environments": {
            "c": {
                "env": "x",
                "config": {"session_secret": "s3cr3t-value", "api_key": "k3y-value", "session_ttl_seconds": 5},
            }
        }
    }
    spec = load_fleet(write(tmp_path, json.dumps(fleet)))
    command = environment_command(spec, spec.environments["c"], "127.0.0.1", 1)
    assert "session_ttl_seconds=5" in command and not [a for a in command if "s3cr3t" in a or "k3y" in a]
    handed = environment_env(spec.environments["c"])
    assert take_secret_overrides(dict(handed)) == ["session_secret=s3cr3t-value", "api_key=k3y-value"]


def test_the_head_server_masks_every_secret_it_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "value-of-an-env-token")
    config = {
        "policy": {"responses_api_models": {"openai_model": {"openai_api_key": "sk-1234567890", "max_tokens": 9}}},
        "judge": {"responses_api_models": {"vllm_model": {"header": "value-of-an-env-token", "tokenizer": "q/q"}}},
        "keys": {"x": {"y": {"api_keys": ["sk-a", "sk-b"], "password": "hunter22", "port": 1}}},
    }
    (tmp_path / "global_config.yaml").write_text(yaml.safe_dump(config))
    served = json.loads(
        TestClient(create_head_app(tmp_path / "global_config.yaml", tmp_path / "i.json"))
        .get("/global_config_dict_yaml")
        .content
    )
    assert not [s for s in ("sk-1234567890", "value-of-an-env-token", "sk-a", "hunter22") if s in served]
    got = yaml.safe_load(served)
    assert got["policy"]["responses_api_models"]["openai_model"] == {"openai_api_key": "****", "max_tokens": 9}
    assert got["judge"]["responses_api_models"]["vllm_model"] == {"header": "****", "tokenizer": "q/q"}
    assert got["keys"]["x"]["y"] == {"api_keys": ["****", "****"], "password": "****", "port": 1}


def test_secrets_inside_text_are_masked_where_served_and_kept_off_command_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret need not be a whole value under a secret-named key: an ``Authorization`` header, a bearer token
    built from a secret environment variable, a URL's password, a secret-named query parameter."""
    monkeypatch.setenv("MY_SERVICE_TOKEN", "value-of-an-env-token")
    model = {
        "openai_base_url": "https://user:url-password-1@api.example.com/v1?api_key=query-key-1&region=eu",
        "default_headers": {"Authorization": "Bearer header-token-1", "X-Trace": "Bearer value-of-an-env-token"},
        "extra_body": {"auth": "auth-value-1"},
        "base_url": "http://10.0.0.5:8000/v1",
    }
    (tmp_path / "global_config.yaml").write_text(yaml.safe_dump({"policy": {"responses_api_models": {"m": model}}}))
    served = json.loads(
        TestClient(create_head_app(tmp_path / "global_config.yaml", tmp_path / "i.json"))
        .get("/global_config_dict_yaml")
        .content
    )
    planted = ("url-password-1", "query-key-1", "header-token-1", "value-of-an-env-token", "auth-value-1")
    assert not [s for s in planted if s in served], served
    got = yaml.safe_load(served)["policy"]["responses_api_models"]["m"]
    assert got["openai_base_url"] == "https://user:****@api.example.com/v1?api_key=****&region=eu"
    assert got["default_headers"] == {"Authorization": "****", "X-Trace": "Bearer ****"}
    assert got["base_url"] == "http://10.0.0.5:8000/v1"  # nothing secret in it: unchanged

    # an environment's settings holding such text reach its unit by its environment, not its command line
    config = {"judge_url": "https://u:url-password-1@judge/v1", "judge_header": "Bearer value-of-an-env-token"}
    fleet = {"environments": {"c": {"env": "x", "config": {**config, "session_ttl_seconds": 5}}}}
    spec = load_fleet(write(tmp_path, json.dumps(fleet)))
    command = environment_command(spec, spec.environments["c"], "127.0.0.1", 1)
    assert "session_ttl_seconds=5" in command and not [a for a in command if any(s in a for s in planted)]
    assert take_secret_overrides(environment_env(spec.environments["c"])) == [f"{k}={v}" for k, v in config.items()]
