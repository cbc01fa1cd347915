"""``ngym containerize`` on installed OpenEnv and verifiers environments (issue 24), with the real Docker engine.

Each test: ``ngym install`` → ``ngym containerize --run --keep`` (the image carries the environment's own
virtualenv, re-created offline from a wheelhouse built here, and its example data) → ``ngym validate`` inside the
container (its example data replayed there) → every recorded example
driven over HTTP (seed → tools → verify) against the container and against ``ngym run`` on this host: the same
rewards (and, for verifiers, the same score of every reward function), equal to what install recorded.

One image per ecosystem: OpenEnv's template (``openenv init``, openenv 0.10.0, in the plugin tests' cached venv)
and verifiers 0.3.1's ``vf_ledger`` module (a ``StatefulToolEnv`` with a ``Rubric``), which is then also served
by ``ngym up`` with the Compose engine (the same image, behind its load balancer) and taken down. The environment venvs'
wheels are cached under ``~/.cache/ngym/wheelhouse`` and the image layers by Docker, so a second run rebuilds
only the code layer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ngym.child_server import free_port
from ngym.config import cache_root
from ngym.containerize.smoke import ExampleRollout, drive_rollout
from ngym.examples import dataset_row, read_example_rollouts
from ngym.fleet.state import FleetState
from tests.integration.conftest import child_venv, start

from .conftest import BASE_IMAGE

REPO = Path(__file__).resolve().parents[2]


def _openenv_tests() -> Any:
    """The OpenEnv plugin tests' fixtures module (its cached venv of openenv 0.10.0), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "ngym_openenv_test_fixtures", REPO / "plugins" / "ngym_openenv" / "tests" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FLEET = "i24-container-catalogue"
LEDGER = REPO / "plugins" / "ngym_verifiers" / "tests" / "fixtures" / "vf_ledger.py"


def _cli(python: Path | str, env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(python), "-m", "ngym.cli", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=1500)


@pytest.fixture
def remove_containers(docker_client: Any) -> Iterator[list[str]]:
    """Container ids a test started: removed whatever fails."""
    ids: list[str] = []
    yield ids
    for container_id in ids:
        subprocess.run(["docker", "rm", "-f", container_id], capture_output=True)


def _containerize_and_compare(
    python: Path | str,
    env: dict[str, str],
    work: Path,
    name: str,
    tag: str,
    rollouts: Path,
    containers: list[str],
    scripted: tuple[ExampleRollout, ...] = (),
) -> list[dict[str, Any]]:
    """containerize --run --keep, then each recorded example against the container and the host: their verify
    answers (container's), after asserting both rewards equal the recorded one."""
    built = _cli(
        python, env, work, "containerize", name, "--base-image", BASE_IMAGE, "--tag", tag, "--run", "--keep", "--json"
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    result = json.loads(built.stdout)
    containers.append(result["run"]["container_id"])
    assert result["run"]["health"] == "healthy" and result["image_size"] > 0
    container_url = result["run"]["url"]

    # the image carries the example data install recorded: ngym validate replays it inside the container
    validated = subprocess.run(
        ["docker", "exec", result["run"]["container_id"], "/opt/ngym/venv/bin/python", "-m", "ngym.cli", "validate"]
        + [name, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert validated.returncode == 0, validated.stdout[-2000:] + validated.stderr[-2000:]
    checks = {check["name"]: check for check in json.loads(validated.stdout)["checks"]}
    assert checks["examples"]["ok"] and checks["app"]["ok"], checks

    port = free_port()
    host = start([str(python), "-m", "ngym.cli", "run", name, "--port", str(port)], port, env=env, timeout=180)
    try:
        answers = []
        recorded = [
            ExampleRollout(dataset_row(record), record["response"], record.get("reward"))
            for record in read_example_rollouts(rollouts)
        ]
        for example in [*recorded, *scripted]:
            in_container = drive_rollout(container_url, example, timeout=120)
            on_host = drive_rollout(f"http://127.0.0.1:{port}", example, timeout=120)
            assert in_container.reward == on_host.reward == pytest.approx(example.expected_reward)
            assert in_container.calls == on_host.calls
            for key in ("reward_components", "step_rewards"):
                assert in_container.verify_response.get(key) == on_host.verify_response.get(key)
            answers.append(in_container.verify_response)
    finally:
        host.stop()
    return answers


def test_an_openenv_folder_environment_is_served_by_its_image(
    tmp_path: Path, base_image: str, image_tag: str, remove_containers: list[str]
) -> None:
    fixtures = _openenv_tests()
    openenv_python = fixtures.cached_venv("openenv-0.10.0-py311", [fixtures.OPENENV], "import openenv.core, uvicorn")
    python, env = child_venv(tmp_path, system_site_packages=False)
    made = subprocess.run(
        [str(Path(openenv_python).with_name("openenv")), "init", "cmd_echo", "--output-dir", str(tmp_path / "src")],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    work = tmp_path / "work"  # not where the folder is: `cmd_echo` must name the installed environment
    work.mkdir()
    installed = _cli(
        python, env, work, "install", f"openenv:{tmp_path / 'src' / 'cmd_echo'}", "--domain", "other",
        "-o", f"python={openenv_python}",
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    env["NGYM_CACHE_DIR"] = str(cache_root())  # the wheelhouse cache, kept between runs
    data = next((tmp_path / "venv").glob("lib/python*/site-packages/ngym_openenv_env_cmd_echo/data"))
    answers = _containerize_and_compare(
        python, env, work, "cmd_echo", image_tag, data / "example_rollouts.jsonl", remove_containers
    )
    # the template echoes: reward = 0.1 per character of the generated message "example", one step
    assert [a["reward"] for a in answers] == [pytest.approx(0.7)]
    assert answers[0]["steps"] == 1 and answers[0]["reward_rule"] == "last"


def test_a_verifiers_module_environment_is_served_by_its_image(
    tmp_path: Path, base_image: str, image_tag: str, remove_containers: list[str]
) -> None:
    records = tmp_path / "records"
    env = {**os.environ, "NGYM_VERIFIERS_RECORDS": str(records)}  # its venv stays cached under ~/.cache/ngym
    installed = _cli(sys.executable, env, tmp_path, "install", f"verifiers:{LEDGER}", "--domain", "math")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    rollouts = records / "vf_ledger" / "data" / "example_rollouts.jsonl"
    first = read_example_rollouts(rollouts)[0]  # start at 5; the answer is 12
    calls = [("c1", {"amount": 3}, "balance is now 8"), ("c2", {"amount": 4}, "balance is now 12")]
    output: list[dict[str, Any]] = []
    for call_id, arguments, said in calls:
        output.append(
            {"type": "function_call", "call_id": call_id, "name": "deposit", "arguments": json.dumps(arguments)}
        )
        output.append({"type": "function_call_output", "call_id": call_id, "output": said})
    output.append({**first["response"]["output"][0]})  # the answer, 12
    # both deposits made on the rollout's state: the ledger part counts too (0.6 + 0.4)
    with_tools = ExampleRollout(dataset_row(first), {**first["response"], "output": output}, 1.0)
    answers = _containerize_and_compare(
        sys.executable,
        env,
        tmp_path,
        "vf_ledger",
        image_tag,
        rollouts,
        remove_containers,
        scripted=(with_tools,),
    )
    # the reference answers' rewards by the environment's own rubric (correct 0.6; the ledger part, 0.4, missed),
    # then the scripted rollout whose deposits the tools made on the container's state
    assert [a["reward"] for a in answers] == [pytest.approx(0.6)] * 3 + [pytest.approx(1.0)]
    assert all(a["reward_components"]["correct_answer"] == 1.0 for a in answers)
    assert answers[-1]["reward_components"]["ledger_matches"] == 1.0
    assert all(a["reward_weights"]["ledger_matches"] == pytest.approx(0.4) for a in answers)

    # `ngym up` with the Compose engine, naming the installed environment: the same image, behind its balancer
    fleet = {"name": FLEET, "engine": "compose", "head_server": {"port": 0}, "environments": {"ledger": "vf_ledger"}}
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    env["NGYM_FLEET_BASE_IMAGE"] = BASE_IMAGE
    up = _cli(sys.executable, env, tmp_path, "up", "fleet.yaml")
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        state = FleetState.load(tmp_path / ".ngym-fleet" / FLEET)
        assert state is not None
        record = state.servers["ledger"]
        rewards = [drive_rollout(f"http://{record.host}:{record.port}", with_tools, timeout=120).reward]
        assert rewards == [pytest.approx(1.0)]
    finally:
        down = _cli(sys.executable, env, tmp_path, "down", "fleet.yaml")
    assert down.returncode == 0, down.stderr
    left = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
    assert not [name for name in left.split() if name.startswith(FLEET)]
