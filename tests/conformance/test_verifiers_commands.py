"""ngym's own commands on installed verifiers environments (issue 24): validate, profile, rollout.

Both APIs, installed with ``ngym install verifiers:...`` into their own cached venvs: ``vf_notes`` (a verifiers
0.4.0 ``vf-init -T`` Taskset with a stateful tool) and ``vf_ledger`` (a verifiers 0.3.1 ``StatefulToolEnv``).
``ngym install`` makes each one's example data from its own tasks (``ngym_verifiers.examples``): the reference
answer of each task as the model's reply, recorded with the reward the environment's own functions gave it.
Then the real CLI, in subprocesses, as a user types it: ``ngym validate`` replays them and probes the verifier,
``ngym profile`` drives them with Locust, ``ngym rollout --model replay`` rolls them out with the replay model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ngym.plugins.registry import reset_registry

FIXTURES = Path(__file__).resolve().parents[2] / "plugins" / "ngym_verifiers" / "tests" / "fixtures"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """vf_notes and vf_ledger installed with their example data, in a scratch records folder."""
    from ngym_verifiers.install import install_source

    folder = tmp_path_factory.mktemp("verifiers-records")
    old = os.environ.get("NGYM_VERIFIERS_RECORDS")
    os.environ["NGYM_VERIFIERS_RECORDS"] = str(folder)
    reset_registry()
    lines: list[str] = []
    try:
        records = {
            "vf_notes": install_source(f"verifiers:{FIXTURES / 'vf_notes'}", echo=lines.append),
            "vf_ledger": install_source(f"verifiers:{FIXTURES / 'vf_ledger.py'}", domain="math", echo=lines.append),
        }
        reset_registry()
        yield {"records": records, "folder": folder, "lines": lines}
    finally:
        if old is None:
            os.environ.pop("NGYM_VERIFIERS_RECORDS", None)
        else:
            os.environ["NGYM_VERIFIERS_RECORDS"] = old
        reset_registry()


def ngym(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ngym.cli", *args], capture_output=True, text=True, timeout=timeout)


def recorded(installed: dict[str, Any], name: str) -> list[dict[str, Any]]:
    path = installed["folder"] / name / "data" / "example_rollouts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


# the reference answers' rewards, by each environment's own functions: vf_notes' answer is worth 0.75 (the word
# was not written into the notebook: 0.25 missed); vf_ledger's 0.6 (no deposit made: the ledger part, 0.4, missed)
EXPECTED = {"vf_notes": [0.75, 0.75, 0.75], "vf_ledger": [0.6, 0.6, 0.6]}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_install_records_example_rollouts_scored_by_the_environment(installed: dict[str, Any], name: str) -> None:
    rollouts = recorded(installed, name)
    assert [r["reward"] for r in rollouts] == pytest.approx(EXPECTED[name])
    assert [r["verifiers"] for r in rollouts] == [{"idx": i} for i in range(3)]
    tools = {t["name"] for t in rollouts[0]["responses_create_params"]["tools"]}
    assert tools == {t["name"] for t in installed["records"][name].tools} and tools
    assert any("3 recorded rollouts" in line for line in installed["lines"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_validate_replays_them_and_probes_the_verifier(installed: dict[str, Any], name: str) -> None:
    done = ngym("validate", name, "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["ok"], done.stdout + done.stderr
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["examples"]["ok"] and "3 rollouts replayed" in checks["examples"]["detail"]
    assert all(c["ok"] for n, c in checks.items() if n.startswith("soundness"))


def test_profile_drives_it_with_locust(installed: dict[str, Any], tmp_path: Path) -> None:
    done = ngym("profile", "vf_ledger", "--users", "4", "--duration", "4s", "--report", str(tmp_path), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["rollouts_finished"] > 0 and result["rollouts_failed"] == 0 and result["passed"] is True
    assert result["total"]["failures"] == 0
    # every replayed rollout got the reward recorded at install (0.6: the reference answer, no ledger work)
    assert result["reward_mismatches"] == 0 and result["mean_reward"] == pytest.approx(0.6)
    endpoints = {e["name"] for e in result["endpoints"]}
    assert {"/seed_session", "/verify", "/close_session"} <= endpoints
    assert any(line.startswith("POST,/verify,") for line in (tmp_path / "profile_stats.csv").read_text().splitlines())


def test_rollout_with_the_replay_model_gets_the_recorded_rewards(installed: dict[str, Any], tmp_path: Path) -> None:
    data = installed["folder"] / "vf_notes" / "data" / "example.jsonl"
    output = tmp_path / "out.jsonl"
    done = ngym("rollout", "vf_notes", "--data", str(data), "--model", "replay", "--output", str(output), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["done"] == 3 and summary["mean_reward"] == pytest.approx(0.75)
    results = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["reward_components"] for r in results] == [{"reward": 1.0, "noted": 0.0}] * 3
