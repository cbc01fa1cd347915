"""The rollout ledger both collectors share: input rows, the resume key, resume, the append, the metrics body."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from ngym import plugin_api
from ngym.errors import ConfigError
from ngym.rollout import ledger


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def result(task: int, repeat: int, **fields: Any) -> dict[str, Any]:
    return {"_ng_task_index": task, "_ng_rollout_index": repeat, **fields}


def test_the_plugin_api_exports_the_ledger() -> None:
    assert plugin_api.LedgerAppender is ledger.LedgerAppender
    assert plugin_api.rollout_key is ledger.rollout_key
    assert plugin_api.read_jsonl is ledger.read_jsonl


def test_read_jsonl_reads_objects_and_skips_blank_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "rows.jsonl", '{"a": 1}\n\n  \n{"a": "é"}\n')
    assert ledger.read_jsonl(path) == [{"a": 1}, {"a": "é"}]
    assert ledger.read_jsonl(path, loads=orjson.loads) == [{"a": 1}, {"a": "é"}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1}\n{"a": \n', r"rows\.jsonl:2: not JSON"),
        ('{"a": 1}\n[1, 2]\n', r"rows\.jsonl:2: a row must be a JSON object"),
    ],
)
def test_read_jsonl_names_the_file_and_line_of_bad_input(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "rows.jsonl", text)
    for loads in (json.loads, orjson.loads):
        with pytest.raises(ConfigError, match=message):
            ledger.read_jsonl(path, loads=loads)


def test_read_jsonl_of_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data file not found"):
        ledger.read_jsonl(tmp_path / "absent.jsonl")


def test_a_line_separator_inside_a_string_stays_in_its_line(tmp_path: Path) -> None:
    """U+2028 is not a JSONL line break: json.dumps(ensure_ascii=False) writes it raw. (The rollout runner read its
    output with ``str.splitlines``, which splits there: such a result was skipped on resume, run again and left out
    of the aggregate metrics.)"""
    line = ledger.json_line(result(0, 0, reward=1.0, text="one\u2028two\u2029three\x85four"))
    path = tmp_path / "out.jsonl"
    path.write_bytes(line + ledger.json_line(result(1, 0, reward=0.0)))
    assert [r["_ng_task_index"] for r in ledger.read_results(path)] == [0, 1]
    assert ledger.read_results(path)[0]["text"] == "one\u2028two\u2029three\x85four"
    assert [r["_ng_task_index"] for r in ledger.read_jsonl(path)] == [0, 1]


def test_the_resume_key_is_row_index_by_repeat() -> None:
    assert ledger.rollout_key(result(3, 1)) == (3, 1)
    assert ledger.rollout_key({}) == (None, None)
    assert ledger.rollout_keys(2, 3) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    rows = [result(1, 1), result(0, 1), {"_ng_task_index": 1}, result(0, 0)]
    assert [ledger.rollout_order(r) for r in sorted(rows, key=ledger.rollout_order)] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]


def test_resume_owes_what_the_output_does_not_hold(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    torn = ledger.json_line(result(1, 1, reward=1.0))[:-9]
    path.write_bytes(
        ledger.json_line(result(0, 0)) + b'{"no task index": true}\n' + ledger.json_line(result(1, 0)) + torn
    )
    done = ledger.done_keys(ledger.read_results(path))
    assert done == {(0, 0), (1, 0)}  # the torn last line is not done, nor a line that is not a result
    assert ledger.pending(ledger.rollout_keys(2, 2), done) == [(0, 1), (1, 1)]
    assert ledger.read_results(tmp_path / "absent.jsonl") == []


def test_a_torn_last_line_is_dropped_before_resuming(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = ledger.json_line(result(0, 0))
    path = tmp_path / "out.jsonl"
    path.write_bytes(whole + b'{"_ng_task_index": 1, "_ng_roll')
    ledger.drop_truncated_tail(path)
    assert path.read_bytes() == whole
    assert "Dropped a truncated final line (31 bytes)" in capsys.readouterr().out
    ledger.drop_truncated_tail(path)  # nothing torn: nothing changes
    assert path.read_bytes() == whole


def test_a_whole_last_line_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}')
    ledger.drop_truncated_tail(path, loads=orjson.loads)
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    ledger.drop_truncated_tail(empty)
    assert empty.read_bytes() == b""


def test_the_appender_writes_whole_lines_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "out.jsonl"
    with ledger.LedgerAppender(path, "w") as sink:
        sink.append(ledger.json_line(result(0, 0, text="é")))
        # unbuffered: the line is in the file before the appender is closed
        assert path.read_bytes() == '{"_ng_task_index": 0, "_ng_rollout_index": 0, "text": "é"}\n'.encode()
    with ledger.LedgerAppender(path, "a") as sink:
        sink.append(orjson.dumps(result(0, 1)) + b"\n")
        assert sink.lines == 1
    assert path.read_bytes().splitlines()[1] == b'{"_ng_task_index":0,"_ng_rollout_index":1}'
    with ledger.LedgerAppender(path, "w"):
        pass
    assert path.read_bytes() == b""  # "w": a fresh file


def test_the_appender_refuses_a_line_without_its_newline(tmp_path: Path) -> None:
    with ledger.LedgerAppender(tmp_path / "out.jsonl") as sink, pytest.raises(ValueError, match="newline"):
        sink.append(b'{"a": 1}')
    assert (tmp_path / "out.jsonl").read_bytes() == b""


def test_the_appender_finishes_a_short_write(tmp_path: Path) -> None:
    """A write the OS takes only part of is finished before append returns (no half line left for the next)."""

    class Trickle:
        def __init__(self) -> None:
            self.data = b""

        def write(self, chunk: memoryview) -> int:
            self.data += bytes(chunk[:3])
            return min(3, len(chunk))

        def close(self) -> None:
            pass

    sink = ledger.LedgerAppender(tmp_path / "out.jsonl")
    sink._file.close()
    sink._file = Trickle()  # type: ignore[assignment]
    sink.append(b'{"reward": 1.0}\n')
    assert sink._file.data == b'{"reward": 1.0}\n'  # type: ignore[attr-defined]


def test_the_metrics_body_drops_heavy_fields_and_keeps_what_is_asked() -> None:
    full = result(0, 0, reward=1.0, response={"output": ["long"], "usage": {"total_tokens": 5}}, params={"x": 1})
    assert ledger.verify_responses([full], drop={"response", "params"}) == [result(0, 0, reward=1.0)]
    assert ledger.verify_responses([full], drop={"response", "params"}, keep_from_response=("usage", "missing")) == [
        result(0, 0, reward=1.0, response={"usage": {"total_tokens": 5}})
    ]
    bare = result(0, 1, reward=0.0, response={"output": []})
    assert ledger.verify_responses([bare], drop={"response"}, keep_from_response=("usage",)) == [
        result(0, 1, reward=0.0)
    ]


def test_mean_reward_over_numeric_rewards() -> None:
    assert ledger.mean_reward([{"reward": 1}, {"reward": 0.0}, {"reward": "x"}, {}]) == 0.5
    assert ledger.mean_reward([{}]) is None


def test_masked_results_are_left_out_of_the_mean_and_counted() -> None:
    """A masked 0.0 (session lost, judge failed) is a placeholder, not a score: the mean is the unmasked one's."""
    results = [{"reward": 1.0}, {"reward": 0.0, "mask_sample": True, "failure_kind": "session_lost"}]
    assert ledger.mean_reward(results) == 1.0
    assert ledger.masked_count(results) == 1
    assert ledger.mean_reward(results[1:]) is None


def test_json_line_is_what_ngym_rollout_writes() -> None:
    record = result(0, 0, text="é ✓", reward=1.0)
    assert ledger.json_line(record) == (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


def test_example_data_is_read_by_the_ledger(tmp_path: Path) -> None:
    """``ngym.examples.read_jsonl`` (validate, ngym.testing, the replay model) reads rows the ledger's way: a raw
    U+2028 inside a string is part of its row, not a line break that made the row 'not JSON'."""
    from ngym.examples import read_jsonl

    row = {"responses_create_params": {"input": "line one\u2028line two"}}
    path = write(tmp_path / "example.jsonl", json.dumps(row, ensure_ascii=False) + "\n")
    assert read_jsonl(path) == [row]
    with pytest.raises(ConfigError, match=r"example\.jsonl:1: not JSON"):
        read_jsonl(write(tmp_path / "example.jsonl", "{\n"))
