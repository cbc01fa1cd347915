"""Dataset rows, tool schemas and trajectories in the shapes a trainer and NeMo Gym's wire each expect.

- :func:`load_rows`: an environment's dataset rows (a JSONL file or a list of dicts; a recorded rollout line is
  reduced to its row);
- :func:`prompt_messages`: the chat prompt of a row, from ``responses_create_params.input``;
- :func:`declared_tools`: the function tools the rows declare (``responses_create_params.tools``), what NeMo
  Gym's wire hands the model;
- :func:`responses_trajectory`: a trainer's chat completion (assistant messages with ``tool_calls``, then ``tool``
  messages) as the Responses object NeMo Gym's agent would have sent to ``/verify`` for the same rollout.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

#: keys of a recorded rollout line that are not part of its dataset row
RECORDED_KEYS = frozenset({"response", "reward"})


def load_rows(data: str | Path | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows from a JSONL file (one row per line) or an iterable of dicts; each must hold ``responses_create_params``."""
    if isinstance(data, str | Path):
        path = Path(data)
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        raw: list[Any] = []
        for number, line in enumerate(lines, 1):
            try:
                raw.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
        where = str(path)
    else:
        raw, where = list(data), "rows"
    rows: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("responses_create_params"), Mapping):
            raise ValueError(f"{where}: row {index} is not a dataset row (no responses_create_params object)")
        rows.append({k: v for k, v in item.items() if k not in RECORDED_KEYS})
    if not rows:
        raise ValueError(f"{where}: no rows")
    return rows


def _text(content: Any) -> str:
    """The text of a Responses content value (a string or a list of ``input_text``/``output_text`` parts)."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, Mapping))


def prompt_messages(row: Mapping[str, Any]) -> list[dict[str, str]]:
    """The row's ``responses_create_params.input`` as chat messages (``developer`` becomes ``system``)."""
    value = row["responses_create_params"].get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    messages: list[dict[str, str]] = []
    for item in value or []:
        if not isinstance(item, Mapping) or item.get("type", "message") != "message" or "role" not in item:
            continue
        role = "system" if item["role"] == "developer" else str(item["role"])
        messages.append({"role": role, "content": _text(item.get("content"))})
    return messages


def declared_tools(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The function tools the rows declare, first declaration of each name, in order of appearance."""
    seen: dict[str, dict[str, Any]] = {}
    for row in rows:
        for tool in row["responses_create_params"].get("tools") or []:
            if isinstance(tool, Mapping) and tool.get("type") == "function" and isinstance(tool.get("name"), str):
                seen.setdefault(tool["name"], dict(tool))
    return list(seen.values())


def _arguments(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})


def responses_output(completion: str | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Responses ``output`` items of a chat completion, in order, with call ids pairing calls and outputs.

    An assistant message becomes its reasoning (``reasoning_content``/``thinking``), its text (a ``message`` item)
    and its ``tool_calls`` (``function_call`` items); each ``tool`` message after it becomes the
    ``function_call_output`` of the next unanswered call.
    """
    if isinstance(completion, str):
        completion = [{"role": "assistant", "content": completion}]
    output: list[dict[str, Any]] = []
    pending: list[str] = []  # call ids not yet answered, in order
    calls = 0
    for number, message in enumerate(completion):
        role = message.get("role")
        if role == "assistant":
            thinking = message.get("reasoning_content") or message.get("thinking")
            if thinking:
                summary = [{"type": "summary_text", "text": str(thinking)}]
                output.append({"type": "reasoning", "id": f"rs_{number}", "summary": summary})
            text = _text(message.get("content"))
            if text:
                output.append(
                    {
                        "type": "message",
                        "id": f"msg_{number}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}],
                    }
                )
            for call in message.get("tool_calls") or []:
                function = call.get("function", call) if isinstance(call, Mapping) else {}
                call_id = str(call.get("id") or f"call_{calls}")
                calls += 1
                pending.append(call_id)
                output.append(
                    {
                        "type": "function_call",
                        "name": str(function.get("name", "")),
                        "arguments": _arguments(function.get("arguments")),
                        "call_id": call_id,
                        "id": f"fc_{call_id}",
                        "status": "completed",
                    }
                )
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or (pending[0] if pending else f"call_{calls}"))
            if call_id in pending:
                pending.remove(call_id)
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            output.append({"type": "function_call_output", "call_id": call_id, "output": text})
    return output


def responses_trajectory(
    row: Mapping[str, Any], completion: str | Sequence[Mapping[str, Any]], *, model: str = "trainer"
) -> dict[str, Any]:
    """The finished Responses object for ``/verify``: the completion's output items, the row's tools and settings."""
    params = row["responses_create_params"]
    return {
        "id": f"resp_{uuid.uuid4().hex}",
        "created_at": time.time(),
        "model": model,
        "object": "response",
        "output": responses_output(completion),
        "parallel_tool_calls": bool(params.get("parallel_tool_calls", True)),
        "tool_choice": params.get("tool_choice") or "auto",
        "tools": list(params.get("tools") or []),
        "status": "completed",
    }
