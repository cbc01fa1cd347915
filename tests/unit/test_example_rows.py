"""Recorded example rollouts pair with the dataset row they were recorded from, by that row's identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ngym.errors import ConfigError
from ngym.examples import read_example_rollouts

PROMPT: dict[str, Any] = {"input": [{"role": "user", "content": "Guess my number."}]}


def write(folder: Path, rows: list[dict[str, Any]], lines: list[dict[str, Any]] | list[Any]) -> Path:
    data = folder / "data"
    data.mkdir()
    (data / "example.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (data / "example_rollouts.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return data / "example_rollouts.jsonl"


def test_rows_sharing_a_prompt_keep_their_own_task_fields(tmp_path: Path) -> None:
    """The issue's case: one prompt, different secrets. Each line is its row plus the recording; matching by
    prompt verified every line on row 0's secret (a silent wrong reward)."""
    rows = [{"responses_create_params": PROMPT, "secret": secret} for secret in (42, 7, 13)]
    lines: list[dict[str, Any]] = [{**row, "response": {"output": []}, "reward": 1.0} for row in rows]
    completed = read_example_rollouts(write(tmp_path, rows, lines))
    assert [line["secret"] for line in completed] == [42, 7, 13]


def test_recorded_lines_in_another_order_still_pair_by_their_fields(tmp_path: Path) -> None:
    rows = [{"responses_create_params": PROMPT, "secret": secret} for secret in (42, 7)]
    lines: list[dict[str, Any]] = [
        {**rows[1], "response": {"output": []}, "reward": 0.0},
        {**rows[0], "response": {}, "reward": 1.0},
    ]
    first, second = read_example_rollouts(write(tmp_path, rows, lines))
    assert (first["secret"], first["reward"]) == (7, 0.0) and (second["secret"], second["reward"]) == (42, 1.0)


def test_a_task_index_names_the_row_when_the_line_lacks_its_fields(tmp_path: Path) -> None:
    rows = [{"responses_create_params": PROMPT, "secret": secret} for secret in (42, 7)]
    lines = [{"responses_create_params": PROMPT, "_ng_task_index": 1, "response": {}, "reward": 1.0}]
    [completed] = read_example_rollouts(write(tmp_path, rows, lines))
    assert completed["secret"] == 7


def test_a_line_two_different_rows_could_be_is_a_loud_error(tmp_path: Path) -> None:
    """A NeMo-style line without the task field or a row index: which secret it was played on is unknowable."""
    rows = [{"responses_create_params": PROMPT, "secret": secret} for secret in (42, 7)]
    lines = [{"responses_create_params": PROMPT, "response": {}, "reward": 1.0}, {"responses_create_params": PROMPT}]
    with pytest.raises(ConfigError) as raised:
        read_example_rollouts(write(tmp_path, rows, lines))
    message = str(raised.value)
    assert "example_rollouts.jsonl:1" in message and "rows 1, 2" in message and "_ng_task_index" in message


def test_identical_rows_are_not_ambiguous(tmp_path: Path) -> None:
    rows = [{"responses_create_params": PROMPT, "secret": 42}] * 2
    lines = [{"responses_create_params": PROMPT, "response": {}, "reward": 1.0}]
    [completed] = read_example_rollouts(write(tmp_path, rows, lines))
    assert completed["secret"] == 42


def test_a_line_whose_fields_contradict_every_row_stays_as_recorded(tmp_path: Path) -> None:
    """Same prompt, but a secret no row has: the line is its own row, not row 0 with the line's reward."""
    rows = [{"responses_create_params": PROMPT, "secret": 42}]
    lines = [{"responses_create_params": PROMPT, "secret": 99, "response": {}, "reward": 0.0}]
    [completed] = read_example_rollouts(write(tmp_path, rows, lines))
    assert completed["secret"] == 99
