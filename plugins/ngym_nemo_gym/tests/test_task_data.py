"""``nemo_gym.task_data``: an environment's row schema loaded from its ``task_data.py`` and rows validated."""

from __future__ import annotations

from pathlib import Path

import pytest
from nemo_gym.task_data import (
    TaskDataSchemaError,
    TaskDataValidator,
    load_task_data_schema,
    normalize_task_fields,
    validate_jsonl_rows,
)

SCHEMA = """
from pydantic import BaseModel, ConfigDict, Field

class TaskData(BaseModel):
    model_config = ConfigDict(extra="allow")
    question: str
    expected: int = Field(json_schema_extra={"legacy_location": "verifier_metadata"})
"""


def _schema(tmp_path: Path, text: str = SCHEMA) -> Path:
    folder = tmp_path / "my_env"
    folder.mkdir()
    (folder / "task_data.py").write_text(text)
    return folder


def test_no_schema_file_is_none_and_a_broken_one_a_clear_error(tmp_path: Path) -> None:
    assert load_task_data_schema(tmp_path) is None
    with pytest.raises(TaskDataSchemaError, match="does not export `TaskData`"):
        load_task_data_schema(_schema(tmp_path, "X = 1\n"))


def test_fields_are_flattened_and_conflicts_reported() -> None:
    row = {"question": "q", "agent_ref": {"name": "a"}, "verifier_metadata": {"expected": 3, "question": "other"}}
    assert normalize_task_fields(row) == ({"question": "q", "expected": 3}, ["question"])


def test_rows_are_validated_with_misplaced_and_unknown_fields_reported(tmp_path: Path) -> None:
    adapter = load_task_data_schema(_schema(tmp_path))
    assert adapter is not None
    lines = [
        '{"question": "q", "verifier_metadata": {"expected": 1}}',  # clean
        "",
        '{"question": "q", "expected": 2, "typo": true}',  # read from verifier_metadata, found at the top
        '{"verifier_metadata": {"expected": "many"}}',  # invalid
        '{"task_id": {"taskset": "t", "task_id": "1"}, "task_input": {"task_data": {"question": "q", "expected": 4}}}',
    ]
    report = validate_jsonl_rows("my_env", adapter, "data.jsonl", lines)
    assert (report.rows, report.error_rows) == (4, 1)
    assert report.misplaced_keys == {"expected": 1} and report.unknown_keys == {"typo": 1}
    assert report.errors[0].startswith("3: ") and not report.clean
    assert "1/4 rows failed" in report.summary()
    validator = TaskDataValidator("my_env", adapter, "x.jsonl")
    validator.validate_row(0, {"task_id": {"taskset": "t", "task_id": "1"}, "task_input": ["not", "an", "object"]})
    assert validator.report.errors == ["0: task_input must be an object, got list"]
