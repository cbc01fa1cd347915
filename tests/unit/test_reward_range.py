"""Rewards outside an environment's ``reward_range``: reported by ``/health``, counted as failures by ``rollout``
and ``profile``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli_runs import fresh_environment, run_ngym


def test_health_reports_the_reward_range() -> None:
    from fastapi.testclient import TestClient

    from ngym.testing import app_for

    with TestClient(app_for("example_single_tool_call")) as client:
        assert client.get("/health").json()["reward_range"] == [0.0, 1.0]


def test_rollout_fails_loudly_on_a_reward_above_one(tmp_path: Path) -> None:
    folder = fresh_environment(tmp_path, verify_reward="2.0 if correct else 0.0")
    out = tmp_path / "out.jsonl"
    done = run_ngym("rollout", str(folder), "--model", "replay", "--output", str(out), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "reward 2.0 is not a number in [0, 1]" in done.stdout
    assert "failed" in done.stdout and "mean reward 1." not in done.stdout and "mean reward 2" not in done.stdout
    written = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert all(row["reward"] <= 1.0 for row in written)  # the out-of-range ones are failures, not results


def test_profile_counts_a_reward_above_one_as_a_failed_rollout(tmp_path: Path) -> None:
    folder = fresh_environment(tmp_path, verify_reward="2.0")  # every rollout: 2.0
    done = run_ngym("profile", str(folder), "--users", "1", "--duration", "2s", "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["rollouts_finished"] == 0 and result["rollouts_failed"] > 0 and result["mean_reward"] is None
    assert "reward 2.0 is not a number in [0, 1]" in done.stderr
