"""``ngym validate``, ``ngym rollout --model replay`` and ``ngym profile`` (real Locust) on installed OpenEnv
environments, as a user types them, in a throwaway virtualenv (nothing lands in the shared .venv).

Two environments: OpenEnv's template (``openenv init``, a folder) and ``openenv-dipg-safety`` (a distribution).
Their example data is what ``ngym install`` generated from what each environment declares
(``ngym_openenv.examples``): the template repeats its example episode, so its reward is recorded and
checked; DIPG draws its task with an unseeded random, so its recording carries no reward to check, and the
commands still run on it. These start several OpenEnv servers (a few seconds of CPU each), so they run in
``make conformance``, not ``make test``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import child_venv

DIPG = "openenv-dipg-safety==0.1.67"  # as conftest.py installs it
#: a data set of one DIPG case (its server reads `<context>`/`<question>` from the user turn, the answer from the
#: assistant's), so that its unseeded shuffle always draws the same case
DIPG_ROW = {
    "messages": [
        {"role": "user", "content": "<context>\nDrug B was given.\n</context>\n<question>\nWhich drug?\n</question>"},
        {"role": "assistant", "content": "Drug B"},
    ]
}


def _ngym(python: Path, env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "ngym.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _data_file(python: Path, env: dict[str, str], name: str, file: str) -> Path:
    """Where the installed environment's generated data file is (its package's data/ folder)."""
    module = f"ngym_openenv_env_{name}"
    found = subprocess.run(
        [str(python), "-c", f"import {module}, pathlib; print(pathlib.Path({module}.__file__).parent)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(found.stdout.strip()) / "data" / file


def _check_commands(python: Path, env: dict[str, str], name: str, tmp: Path, reward: float) -> None:
    rows = _data_file(python, env, name, "example.jsonl")
    rollouts = _data_file(python, env, name, "example_rollouts.jsonl")
    row = json.loads(rows.read_text().splitlines()[0])
    assert row["responses_create_params"]["tools"], "the row offers the environment's tools"
    assert "first observation" in row["responses_create_params"]["input"][0]["content"]
    assert json.loads(rollouts.read_text().splitlines()[0]).get("reward") == reward

    validated = _ngym(python, env, "validate", name, "--json")
    assert "Traceback" not in validated.stderr
    report = json.loads(validated.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert checks["examples"]["ok"] and checks["app"]["ok"], checks
    assert all(c["ok"] for n, c in checks.items() if n.startswith("soundness")), checks

    out = tmp / f"{name}-rollouts.jsonl"
    # no --data: the example data install wrote (issue 24), named on one line
    rolled = _ngym(python, env, "rollout", name, "--model", "replay", "--output", str(out))
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert f"ngym: no --data: rolling out {name}'s example data, {rows}" in rolled.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
    assert len(lines) == 1
    verified = lines[0]
    assert verified["reward"] is not None and not verified.get("mask_sample"), verified
    assert verified["reward"] == reward
    assert verified.get("steps") == 1 and verified.get("reward_rule") == "last"

    profiled = _ngym(python, env, "profile", name, "--users", "1", "--duration", "4s", "--json")
    assert profiled.returncode == 0, profiled.stdout[-2000:] + profiled.stderr[-2000:]
    result: dict[str, Any] = json.loads(profiled.stdout)
    assert result["passed"] and result["rollouts_finished"] >= 1 and result["rollouts_failed"] == 0, result
    assert result["reward_mismatches"] == 0 and result["mean_reward"] == pytest.approx(reward), result


@pytest.fixture
def user_venv(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    return child_venv(tmp_path, system_site_packages=False)


def test_template_environment(user_venv: tuple[Path, dict[str, str]], openenv_python: str, tmp_path: Path) -> None:
    python, env = user_venv
    cli = str(Path(openenv_python).with_name("openenv"))
    made = subprocess.run([cli, "init", "cmd_echo", "--output-dir", str(tmp_path)], capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    installed = _ngym(
        python,
        env,
        "install",
        f"openenv:{tmp_path / 'cmd_echo'}",
        "--domain",
        "other",
        "-o",
        f"python={openenv_python}",
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # the template echoes: reward = min(0.1 * len(message), 1) for the generated message "example"
    assert "example rollout recorded: step" in installed.stdout and "reward 0.7" in installed.stdout
    recorded = json.loads(_data_file(python, env, "cmd_echo", "example_rollouts.jsonl").read_text().splitlines()[0])
    assert recorded["reward"] == pytest.approx(0.7)
    _check_commands(python, env, "cmd_echo", tmp_path, reward=recorded["reward"])


def test_distribution_environment(user_venv: tuple[Path, dict[str, str]], dipg_python: str, tmp_path: Path) -> None:
    python, env = user_venv
    data = tmp_path / "dipg.jsonl"  # one case: DIPG shuffles its rows with an unseeded random
    data.write_text(json.dumps(DIPG_ROW) + "\n")
    env |= {"DIPG_DATASET_PATH": str(data), "DATABASE_URL": f"sqlite:///{tmp_path / 'dipg.db'}"}
    installed = _ngym(python, env, "install", f"openenv:{DIPG}", "--as", "cmd_dipg", "-o", f"python={dipg_python}")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "example rollout recorded: step" in installed.stdout and "repeated by a second episode" in installed.stdout
    # DIPG scores the generated answer "example" on its own scale (a format error: negative)
    recorded = json.loads(_data_file(python, env, "cmd_dipg", "example_rollouts.jsonl").read_text().splitlines()[0])
    assert isinstance(recorded["reward"], float) and recorded["reward"] < 0
    _check_commands(python, env, "cmd_dipg", tmp_path, reward=recorded["reward"])
