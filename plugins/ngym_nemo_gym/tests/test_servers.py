"""Server names → URLs: explicit URLs first, then the run's configs in NeMo Gym's shape."""

from __future__ import annotations

import pytest
from ngym_nemo_gym.servers import (
    ServerNotConfigured,
    ServerTarget,
    instance_fields,
    resolve_server,
    set_global_config,
    set_server_urls,
)

pytestmark = pytest.mark.usefixtures("clean_server_env")

JUDGE = {"openai_base_url": "https://api.example/v1/", "openai_api_key": "sk-x"}
CONFIG = {
    "judge_model": {"responses_api_models": {"openai_model": JUDGE}},
    "user_sim": {"responses_api_models": {"vllm_model": {"host": "10.0.0.2", "port": 9000}}},
    "policy_base_url": "https://ignored",
}  # fmt: skip


def test_config_instances_resolve_to_base_urls_and_host_ports() -> None:
    set_global_config(CONFIG)
    judge = resolve_server("judge_model")
    assert judge == ServerTarget("judge_model", "https://api.example/v1", "sk-x")
    assert judge.url_for("/v1/chat/completions") == "https://api.example/v1/chat/completions"
    assert judge.headers() == {"Authorization": "Bearer sk-x"}
    user_sim = resolve_server("user_sim")
    assert user_sim.url_for("/v1/responses") == "http://10.0.0.2:9000/v1/responses"
    assert user_sim.headers() == {}


def test_an_explicit_url_wins_over_the_config() -> None:
    set_global_config(CONFIG)
    set_server_urls({"user_sim": "http://127.0.0.1:8123"})
    set_server_urls({"judge_model": "http://127.0.0.1:8124/v1"})  # later calls add, not replace
    assert resolve_server("user_sim").base_url == "http://127.0.0.1:8123"
    assert resolve_server("judge_model").url_for("v1/responses") == "http://127.0.0.1:8124/v1/responses"


def test_an_unknown_name_says_how_to_give_it_a_url() -> None:
    set_global_config(CONFIG)
    with pytest.raises(ServerNotConfigured, match=r"--model-url policy_base_url=URL"):
        resolve_server("policy_base_url")  # a scalar, not an instance
    with pytest.raises(ServerNotConfigured, match="no URL for server 'nobody'"):
        resolve_server("nobody")


def test_a_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="must start with http"):
        set_server_urls({"judge_model": "judge:8000"})


def test_instance_fields_reads_three_levels() -> None:
    assert instance_fields(CONFIG, "user_sim") == {"host": "10.0.0.2", "port": 9000}
    assert instance_fields(CONFIG, "missing") is None
    assert instance_fields({"x": {}}, "x") is None


def test_get_server_url_falls_back_to_the_instances_host_and_port_in_nemos_global_config(
    monkeypatch: pytest.MonkeyPatch, clean_server_env: None
) -> None:
    from nemo_gym import server_utils

    config = {"judge": {"responses_api_models": {"openai_model": {"host": "127.0.0.1", "port": 12000}}}}
    monkeypatch.setattr(server_utils, "get_global_config_dict", lambda: config)
    assert server_utils.get_server_url("judge") == "http://127.0.0.1:12000"
    with pytest.raises(server_utils.ServerNotConfigured):
        server_utils.get_server_url("unknown")


def test_a_name_is_resolved_once_until_the_carried_configs_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge's name is resolved on every judge call: the carried JSON (and a ``${...}`` config's OmegaConf
    tree) is parsed once per value, and a changed value is read again."""
    import ngym_nemo_gym.servers as servers

    parsed: list[str] = []
    real = servers.read_global_config
    monkeypatch.setattr(servers, "read_global_config", lambda: parsed.append("config") or real())
    judge = {"judge": {"t": {"i": {"host": "${judge_host}", "port": 1}}}}
    set_global_config({**CONFIG, **judge, "judge_host": "10.0.0.9"})
    for _ in range(5):
        assert resolve_server("judge").base_url == "http://10.0.0.9:1"
    assert parsed == ["config"]
    set_global_config({**CONFIG, **judge, "judge_host": "10.0.0.10"})
    assert resolve_server("judge").base_url == "http://10.0.0.10:1"
    set_server_urls({"judge": "http://127.0.0.1:8125"})  # an explicit URL given later still wins
    assert resolve_server("judge").base_url == "http://127.0.0.1:8125"
    assert parsed == ["config", "config"]  # the explicit URL needed no config
    with pytest.raises(ServerNotConfigured):  # an unknown name is not remembered as anything
        resolve_server("nobody")
