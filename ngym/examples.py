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
from ngym.rollout import ledger
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
    """The JSON objects of a JSONL file (blank lines skipped); a missing file or a bad line is a ConfigError.

    The rollout ledger's reader (:func:`ngym.rollout.ledger.read_jsonl`): every JSONL input is read one way.
    """
    return ledger.read_jsonl(path)


def read_example_rollouts(path: Path) -> list[dict[str, Any]]:
    """Example-rollout lines, each completed into what its ``/verify`` body must be.

    ngym's own lines are the dataset row plus ``response`` and ``reward``. NeMo Gym's are verify *responses*:
    they carry outputs (judge evaluations, parsed answers) and may lack row fields, and its ``gym eval
    reverify`` instead sends each recorded ``response`` on its dataset row. So each line is paired with the
    row of ``example.jsonl`` beside it that it was recorded from, by that row's identity (``match_row``), and
    becomes that row plus the line's ``response`` and ``reward``. A line two different rows could equally be
    is a ConfigError naming both, never a guess: verifying a recording on another row's task fields is a
    silent wrong reward. A line no row agrees with (recorded on another dataset) is verified as it was recorded.
    Nulls in ``responses_create_params`` are dropped: NeMo dumps rows with them and its
    strict request model rejects ``parallel_tool_calls: null``.
    """
    path = Path(path)
    lines = read_jsonl(path)
    rows_path = path.with_name(EXAMPLE_ROWS)
    rows = read_jsonl(rows_path) if path.name != EXAMPLE_ROWS and rows_path.is_file() else []

    completed = []
    for index, line in enumerate(lines):
        source = match_row(line, rows, position=index if len(rows) == len(lines) else None, where=f"{path}:{index + 1}")
        if source is not None and "response" in line:
            line = {**source, **{k: line[k] for k in RECORDED_KEYS if k in line}}
        params = line.get("responses_create_params")
        if isinstance(params, dict):
            line = {**line, "responses_create_params": {k: v for k, v in params.items() if v is not None}}
        completed.append(line)
    return completed


def match_row(
    line: dict[str, Any], rows: list[dict[str, Any]], *, position: int | None = None, where: str = "line"
) -> dict[str, Any] | None:
    """The dataset row a recorded rollout line was recorded from, or None when no row is it.

    Rows are told apart by what identifies them, strongest first:

    1. the whole row: its prompt and every other field of the row are in the line with the same values
       (ngym's own lines are the row plus ``response`` and ``reward``, so rows that share a prompt and differ
       only in a task field such as ``secret`` still pair with their own row);
    2. the row index NeMo Gym records (``_ng_task_index``; it records rollouts in completion order, not row
       order), when the fields the line and that row share agree;
    3. the prompt (messages compared without the ``"type": "message"`` NeMo's recordings add), when the line
       lacks the task fields: rows that share the prompt but differ elsewhere make the line ambiguous, an error;
    4. the row at the same ``position`` (given when the counts agree), when the fields they share agree.

    Raises ConfigError when a line matches two different rows at the strongest level it matches at.
    """
    if not rows:
        return None
    prompt = _prompt_key(line)
    same_prompt = [(i, row) for i, row in enumerate(rows) if _prompt_key(row) == prompt and _agrees(row, line)]
    whole = [(i, row) for i, row in same_prompt if set(row) <= set(line)]
    if whole:
        return _one(whole, where, "has every field of")
    task = line.get(TASK_INDEX_KEY)
    if isinstance(task, int) and not isinstance(task, bool) and 0 <= task < len(rows) and _agrees(rows[task], line):
        return rows[task]
    if same_prompt:
        return _one(same_prompt, where, "has the prompt of")
    if position is not None and _agrees(rows[position], line):
        return rows[position]
    return None


def _one(candidates: list[tuple[int, dict[str, Any]]], where: str, how: str) -> dict[str, Any]:
    """The single distinct row among ``candidates``; two different rows are an ambiguity, said loudly."""
    distinct: dict[str, tuple[int, dict[str, Any]]] = {}
    for index, row in candidates:
        distinct.setdefault(json.dumps(row, sort_keys=True), (index, row))
    if len(distinct) == 1:
        return candidates[0][1]
    numbers = ", ".join(str(index + 1) for index, _ in distinct.values())
    raise ConfigError(
        f"{where}: this recorded rollout {how} {EXAMPLE_ROWS} rows {numbers}, which differ in their other fields; "
        f"cannot tell which row it was recorded from. Put the row's fields in the line (ngym's form: the whole "
        f"row plus response and reward) or its row index as {TASK_INDEX_KEY} (0-based)"
    )


def _agrees(row: dict[str, Any], line: dict[str, Any]) -> bool:
    """Whether every field the row and the line share has the same value (the prompt aside: a recording may
    hold a materialised prompt; ``_prompt_key`` compares prompts where that is the question)."""
    return all(line[key] == value for key, value in row.items() if key in line and key not in _NOT_COMPARED)


#: Fields not compared value-for-value: the request (NeMo dumps it with nulls, defaults and message types), the
#: agent a row is routed to (NeMo records it resolved, ``{"name": ...}`` for ``{"type": ..., "name": ...}``: not
#: task data) and the recording's own keys.
_NOT_COMPARED = ("responses_create_params", "agent_ref", TASK_INDEX_KEY, *RECORDED_KEYS)


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
