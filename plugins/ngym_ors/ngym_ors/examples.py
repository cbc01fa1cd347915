"""Recorded example rollouts of an installed ORS environment, made at ``ngym install`` with its own code.

ngym environments ship ``data/example_rollouts.jsonl`` (one rollout per row with the reward it must get again):
``ngym validate``, ``rollout --model replay`` and ``containerize --run`` replay them. An ORS environment ships
none, and ngym does not know its tasks' right answers, so the rollout recorded for a row is the shortest one that
ends the episode, played on the environment's own server (``openreward.environments.Server``, as it is served):

- with a ``@terminal`` tool: an empty final message, passed to it;
- otherwise: the first tool that answers ``finished: true`` with a reward, called alone on a fresh session: one
  that takes no required argument (a ``submit``), else one whose required arguments are all strings, given empty
  strings (``answer(answer="")``, as in the environment ``orwd init`` scaffolds).

Its reward is what the environment gave that rollout (typically a failing grade): replaying it checks that
serving through ngym scores as the environment does. A row with no such rollout has none. Only the first
``max_rollouts`` rows (default 5, ``-o max_rollouts=N``; 0: none) are played.
"""

from __future__ import annotations

import json
from typing import Any

from ngym_ors.inner_server import InnerServer
from ngym_ors.records import Record


def response(calls: list[tuple[str, dict[str, Any]]], outputs: list[str], final: str | None) -> dict[str, Any]:
    """A finished Responses object: the tool calls with their outputs, then the final message (if any)."""
    items: list[dict[str, Any]] = []
    for index, ((name, arguments), output) in enumerate(zip(calls, outputs, strict=True)):
        call_id = f"call_example_{index}"
        items.append({"type": "function_call", "name": name, "arguments": json.dumps(arguments), "call_id": call_id})
        items.append({"type": "function_call_output", "call_id": call_id, "output": output})
    if final is not None:
        items.append(
            {
                "type": "message", "id": "msg_example", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": final, "annotations": []}],
            }
        )  # fmt: skip
    return {
        "id": "resp_example", "created_at": 0.0, "model": "ors-example", "object": "response", "output": items,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
    }  # fmt: skip


def _closers(record: Record) -> list[tuple[str, dict[str, Any]]]:
    """The tools a rollout may call with nothing to say, and their arguments: those with no required field in their
    input schema (no arguments), then those whose required fields are all strings (each an empty string)."""
    bare: list[tuple[str, dict[str, Any]]] = []
    blank: list[tuple[str, dict[str, Any]]] = []
    for tool in record.tools:
        schema = tool.get("input_schema") or {}
        required = schema.get("required") or []
        properties = schema.get("properties") or {}
        if not required:
            bare.append((tool["name"], {}))
        elif all((properties.get(field) or {}).get("type") == "string" for field in required):
            blank.append((tool["name"], dict.fromkeys(required, "")))
    return bare + blank


async def _play(server: InnerServer, record: Record, row: dict[str, Any], number: int) -> dict[str, Any] | None:
    task = dict(row["ors"])
    terminal = record.terminal_tool
    candidates: list[tuple[str, dict[str, Any]] | None] = [None] if terminal is not None else list(_closers(record))
    for attempt, closer in enumerate(candidates):
        sid = f"ngym-install-{number}-{attempt}"
        try:
            await server.create(sid, task)
            if closer is None:
                assert terminal is not None
                arguments = {terminal["arg"]: ""} if terminal.get("arg") else {}
                result = await server.call(sid, terminal["name"], arguments)
                recorded = response([], [], "")
            else:
                name, arguments = closer
                result = await server.call(sid, name, arguments)
                recorded = response([(name, arguments)], [result.text], None)
        finally:
            await server.delete(sid)
        if result.ok and result.finished and result.reward is not None:
            return {**row, "response": recorded, "reward": float(result.reward)}
    return None


async def record_rollouts(
    server: InnerServer, record: Record, rows: list[dict[str, Any]], limit: int
) -> list[dict[str, Any]]:
    """The recorded rollouts of the first ``limit`` rows, played on ``server`` (see the module docstring)."""
    played = [await _play(server, record, row, n) for n, row in enumerate(rows[: max(limit, 0)])]
    return [p for p in played if p is not None]
