"""A recording that verify now scores differently is named row by row as possibly stale, not as a broken server."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli_runs import fresh_environment, run_ngym


def _stale(folder: Path) -> None:
    """Flip the recorded reward of the first example rollout (as if verify had changed since it was recorded)."""
    path = folder / "data" / "example_rollouts.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows[0]["reward"] = 1.0 - rows[0]["reward"]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_profile_names_the_rows_a_stale_recording_scores_differently_and_exits_0(tmp_path: Path) -> None:
    folder = fresh_environment(tmp_path)
    _stale(folder)
    done = run_ngym("profile", str(folder), "--users", "1", "--duration", "2s", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "row 0: recorded" in done.stdout and "the recording may be stale" in done.stdout
    assert "0 failed" in done.stdout


def test_rollout_with_the_replay_model_says_a_recording_may_be_stale(tmp_path: Path) -> None:
    folder = fresh_environment(tmp_path)
    _stale(folder)
    data = folder / "data" / "example_rollouts.jsonl"
    done = run_ngym(
        "rollout", str(folder), "--data", str(data), "--model", "replay", "--output", "o.jsonl", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "row 0: recorded" in done.stdout and "the recording may be stale" in done.stdout


def test_validate_numbers_a_stale_recording_as_the_file_does(tmp_path: Path) -> None:
    """The first recorded rollout is "row 1", as the progress line and the file's first line count it: "row 0"
    sent a reader to the second line, whose recorded reward is not the one the message names."""
    folder = fresh_environment(tmp_path)
    _stale(folder)
    done = run_ngym("validate", str(folder), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "row 1: reward 1.0 != recorded 0.0" in done.stdout, done.stdout
