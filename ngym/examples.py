"""The example-data convention every environment follows, in one place.

An environment ships ``data/example.jsonl`` (dataset rows) and ``data/example_rollouts.jsonl`` (one recorded
rollout per row: the row plus ``response``, the finished Responses object, and ``reward``, the reward it must
get). ``ngym validate``, ``profile``, ``containerize --run``, ``rollout``'s replay model, the demo and
``ngym.testing`` all read them through these functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ngym.errors import ConfigError
from ngym.server.protocol import TASK_INDEX_KEY

EXAMPLE_ROWS = "example.jsonl"
EXAMPLE_ROLLOUTS = "example_rollouts.jsonl"
#: Keys of an example-rollout line that are not part of the dataset row.
RECORDED_KEYS = ("response", "reward")


@dataclass(frozen=True)
class ToolCall:
    """A recorded ``function_call`` item: the tool's route and its decoded arguments."""

    name: str
    arguments: Any


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file (blank lines skipped); a missing file or a bad line is a ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"data file not found: {path}")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not JSON: {exc}") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{number}: a row must be a JSON object")
        rows.append(row)
    return rows


def read_example_rollouts(path: Path) -> list[dict[str, Any]]:
    """Example-rollout lines, each completed into what its ``/verify`` body must be.

    ngym's own lines are the dataset row plus ``response`` and ``reward``. NeMo Gym's are verify *responses*:
    they carry outputs (judge evaluations, parsed answers) and may lack row fields, and its ``gym eval
    reverify`` instead sends each recorded ``response`` on its dataset row. So a line whose prompt matches a
    row of ``example.jsonl`` beside it (messages compared without the ``"type": "message"`` NeMo's recordings
    add; else the row its ``_ng_task_index`` names — NeMo records rollouts in completion order, not row order;
    else the row at the same position, when the counts agree) becomes that row plus the line's ``response``
    and ``reward``. Nulls in ``responses_create_params`` are dropped:
    NeMo dumps rows with them and its strict request model rejects ``parallel_tool_calls: null``.
    """
    path = Path(path)
    lines = read_jsonl(path)
    rows_path = path.with_name(EXAMPLE_ROWS)
    rows = read_jsonl(rows_path) if path.name != EXAMPLE_ROWS and rows_path.is_file() else []

    by_prompt: dict[str, dict[str, Any]] = {}
    for row in rows:
        by_prompt.setdefault(_prompt_key(row), row)
    completed = []
    for index, line in enumerate(lines):
        task = line.get(TASK_INDEX_KEY)
        by_task = rows[task] if isinstance(task, int) and 0 <= task < len(rows) else None
        source = by_prompt.get(_prompt_key(line)) or by_task or (rows[index] if len(rows) == len(lines) else None)
        if source is not None and "response" in line:
            line = {**source, **{k: line[k] for k in RECORDED_KEYS if k in line}}
        params = line.get("responses_create_params")
        if isinstance(params, dict):
            line = {**line, "responses_create_params": {k: v for k, v in params.items() if v is not None}}
        completed.append(line)
    return completed


def _prompt_key(row: dict[str, Any]) -> str:
    """A row's input messages, comparable between a dataset row and NeMo's recording of it (which dumps every
    message with ``"type": "message"``, a key dataset rows usually leave out)."""
    given = (row.get("responses_create_params") or {}).get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given
    if not isinstance(items, list):
        return json.dumps(items, sort_keys=True)
    canonical = [
        {k: v for k, v in item.items() if not (k == "type" and v == "message")} if isinstance(item, dict) else item
        for item in items
    ]
    return json.dumps(canonical, sort_keys=True)


def dataset_row(line: dict[str, Any]) -> dict[str, Any]:
    """The dataset row of an example-rollout line (the line without its ``response`` and ``reward``)."""
    return {k: v for k, v in line.items() if k not in RECORDED_KEYS}


def recorded_tool_calls(response: dict[str, Any] | None) -> list[ToolCall]:
    """The ``function_call`` items of a recorded response, in order, with their JSON arguments decoded."""
    calls: list[ToolCall] = []
    for index, item in enumerate((response or {}).get("output") or []):
        if not isinstance(item, dict) or item.get("type") != "function_call":
            continue
        raw = item.get("arguments") or "{}"
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as exc:
            raise ConfigError(f"output item {index} ({item.get('name')}): arguments are not JSON: {exc}") from None
        calls.append(ToolCall(name=str(item["name"]), arguments=arguments))
    return calls


def example_file(folder: Path | None, name: str) -> Path | None:
    """``<folder>/data/<name>`` when the environment folder ships it."""
    if folder is None:
        return None
    candidate = Path(folder) / "data" / name
    return candidate if candidate.is_file() else None
