"""Typos get named, addresses are told truthfully, probes stay cookie-free (issue 16)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ngym.server.hosting.host import _listen_line
from ngym.server.pipeline.app import ServeSpec
from ngym.suggest import did_you_mean
from ngym.testing import app_for, serve_in_process

WEATHER = "example_single_tool_call"
REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("lenient_registry")


def ngym(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The console script in-process (errors become one line at its edge): exit code and output."""
    from ngym.cli import main

    with pytest.raises(SystemExit) as exited:
        main(args)
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out + captured.err


def test_did_you_mean() -> None:
    assert did_you_mean("prot", ["port", "host"]) == "; did you mean 'port'?"
    assert did_you_mean("zzz", ["port", "host"]) == ""


@pytest.mark.parametrize("command", ["run", "validate", "containerize"])
def test_a_near_miss_environment_name_gets_a_suggestion(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = ngym([command, "example_single_tool_cal"], capsys)
    assert code != 0
    assert f"did you mean {WEATHER!r}?" in output


@pytest.mark.parametrize("target", [WEATHER, str(REPO / "resources_servers" / WEATHER / "configs" / f"{WEATHER}.yaml")])
def test_an_unknown_override_key_is_one_clear_error(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = ngym(["run", target, "no_such_field=1", "prot=9000", "--port", "0"], capsys)
    assert code == 2
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "unknown config key 'no_such_field'" in lines[0]
    assert "valid keys for WeatherResourcesServerConfig:" in lines[0] and "port" in lines[0]
    _, typo = ngym(["run", target, "prot=9000"], capsys)
    assert "unknown config key 'prot'; did you mean 'port'?" in typo


def test_docker_run_arguments_get_the_same_check() -> None:
    """The image's entrypoint passes `docker run IMAGE key=value` words to `ngym run`."""
    from ngym.containerize.entrypoint import main

    with pytest.raises(SystemExit) as exited:
        main(["run", WEATHER, "--host", "0.0.0.0", "--port", "0", "no_such_field=1"])
    assert exited.value.code == 2


def test_known_override_keys_and_yaml_keys_pass() -> None:
    from ngym.cli.run import build_specs

    specs = build_specs((WEATHER, "session_ttl_seconds=60", "description=x"), None, 0)
    assert specs[0].fields["session_ttl_seconds"] == 60


def test_the_listen_line_says_where_the_server_is_bound() -> None:
    spec = ServeSpec(target="x:Y", name="env")
    everywhere = _listen_line(spec, "0.0.0.0", 8000, "agent", 1)
    assert "at http://0.0.0.0:8000 (all interfaces)" in everywhere and "127.0.0.1" not in everywhere
    assert "at http://127.0.0.1:9000  (docs" in _listen_line(spec, "127.0.0.1", 9000, "agent", 1)


async def test_health_and_probes_set_no_session_cookie() -> None:
    async with serve_in_process(app_for(WEATHER)) as http:
        for path in ("/health", "/healthz", "/", "/openapi.json"):
            response = await http.get(path)
            assert response.status_code == 200 and "set-cookie" not in response.headers, path
        seeded = await http.post("/seed_session", json={})
        assert "set-cookie" in seeded.headers  # a rollout still gets its session
