"""`ngym run`, `ng_run` and `run_webserver()` as real processes; config errors as one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ngym.child_server import free_port
from ngym.testing import make_response
from tests.integration.conftest import FIXTURES, VENV_BIN, HandCookieClient

SEED_CONFIG = FIXTURES / "seed_weather" / "configs" / "seed_weather.yaml"
RESPONSE = make_response(text="Cold.", calls=[("get_weather", {"city": "Oslo"})])
ROW = {"responses_create_params": {"input": [{"role": "user", "content": "Weather in Oslo?"}]}}


def weather_rollout(url: str) -> float:
    client = HandCookieClient(url)
    assert client.post("/seed_session", ROW).status_code == 200
    weather = client.post("/get_weather", {"city": "Oslo"}).json()
    assert weather == {"city": "Oslo", "weather_description": "The weather in Oslo is cold."}
    verified = client.post("/verify", {**ROW, "response": RESPONSE})
    assert verified.status_code == 200, verified.text
    return verified.json()["reward"]


def test_seed_weather_example_served_from_its_config(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    served = serve([str(VENV_BIN / "ngym"), "run", str(SEED_CONFIG), "--port", str(port)], port)
    assert weather_rollout(served.url) == 1.0
    code, out = served.stop(signal.SIGTERM)
    assert code == 0
    assert f"serving seed_weather (agent) at http://127.0.0.1:{port}" in out


def test_ng_run_alias_with_hydra_style_config_paths(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    override = f"+seed_weather.resources_servers.seed_weather.port={port}"
    served = serve([str(VENV_BIN / "ng_run"), f"+config_paths=[{SEED_CONFIG}]", override], port)
    assert weather_rollout(served.url) == 1.0
    assert served.stop(signal.SIGINT)[0] == 0


def test_run_webserver_when_the_module_runs_as_a_script(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    app = FIXTURES / "seed_weather" / "app.py"
    served = serve([sys.executable, str(app), f"port={port}", "domain=agent"], port)
    assert weather_rollout(served.url) == 1.0


def test_two_configs_serve_two_servers(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ports = free_port(), free_port()
    configs = []
    for index, port in enumerate(ports):
        config = tmp_path / f"weather{index}.yaml"
        config.write_text(
            f"w{index}:\n  resources_servers:\n    seed_weather:\n"
            f"      entrypoint: {FIXTURES / 'seed_weather' / 'app.py'}\n      domain: agent\n      port: {port}\n"
        )
        configs.append(str(config))
    served = serve([str(VENV_BIN / "ngym"), "run", *configs], ports[0])
    second = f"http://127.0.0.1:{ports[1]}"
    import httpx

    for _ in range(100):
        try:
            httpx.get(second)
            break
        except httpx.TransportError:
            import time

            time.sleep(0.05)
    assert weather_rollout(served.url) == 1.0
    assert weather_rollout(second) == 1.0
    assert served.stop()[0] == 0


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("w:\n  resources_servers:\n    w:\n      entrypoint: app.py\n      domain: mathz\n", "invalid domain 'mathz'"),
        ("w:\n  resources_servers:\n    w:\n      entrypoint: nowhere.py\n      domain: agent\n", "not found"),
        ("w:\n  resources_servers:\n    w:\n      entrypoint: app.py\n      domain: agent\n      port: high\n", "port"),
        ("w: [unclosed\n", "not valid YAML"),
        ("w:\n  resources_servers:\n    w:\n      domain: agent\n", "'entrypoint' is required"),
    ],
)
def test_bad_config_is_one_readable_line_and_exit_2(tmp_path: Path, yaml_text: str, expected: str) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "app.py").write_text((FIXTURES / "seed_weather" / "app.py").read_text())
    config = tmp_path / "configs" / "w.yaml"
    config.write_text(yaml_text)
    result = subprocess.run([str(VENV_BIN / "ngym"), "run", str(config)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ngym: error:"), result.stderr
    assert expected in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_environment_name_is_exit_2() -> None:
    result = subprocess.run([str(VENV_BIN / "ngym"), "run", "no_such_env"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "no environment named 'no_such_env'" in result.stderr
    assert "example_single_tool_call" in result.stderr  # names what is installed


def test_port_in_use_is_a_clear_error(serve) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    serve([str(VENV_BIN / "ngym"), "run", "example_single_tool_call", "--port", str(port)], port)
    result = subprocess.run(
        [str(VENV_BIN / "ngym"), "run", "example_single_tool_call", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr


def test_several_workers_on_the_memory_store_without_haproxy_is_one_clear_line(tmp_path: Path) -> None:
    """With the memory store, --workers N runs behind HAProxy (tests/integration/test_affine_workers.py); when it
    is not installed, one line says how to get it (exit 2), nothing is left running."""
    result = subprocess.run(
        [str(VENV_BIN / "ngym"), "run", "example_session_state_mgmt", "--workers", "2", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "NGYM_HAPROXY": str(tmp_path / "no-haproxy")},
    )
    assert result.returncode == 2, result.stderr
    assert "HAProxy, which is not installed" in result.stderr and "apt-get install haproxy" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_haproxy_nice_is_one_clear_line() -> None:
    """NGYM_HAPROXY_NICE (how far below the workers HAProxy runs) that is not 0-19: one line naming it, exit 2."""
    result = subprocess.run(
        [str(VENV_BIN / "ngym"), "run", "example_session_state_mgmt", "--workers", "2", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "NGYM_HAPROXY_NICE": "ten", "NGYM_SESSION_STORE": "memory"},
    )
    assert result.returncode == 2, result.stderr
    assert "NGYM_HAPROXY_NICE='ten': expected a number of nice levels from 0 to 19" in result.stderr
    assert "Traceback" not in result.stderr


def test_health_names_the_plugin(serve) -> None:  # type: ignore[no-untyped-def]
    import httpx

    port = free_port()
    served = serve([str(VENV_BIN / "ngym"), "run", "example_session_state_mgmt", "--port", str(port)], port)
    health = httpx.get(f"{served.url}/health").json()
    assert health["domain"] == "agent" and health["name"] == "example_session_state_mgmt"
    assert health["plugin"] == "ngym-example-session-state-mgmt" and health["version"] == "0.1.0"
    assert json.dumps(health)
