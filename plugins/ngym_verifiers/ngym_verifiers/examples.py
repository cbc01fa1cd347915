"""Example data of an installed verifiers environment, made at ``ngym install`` from its own dataset.

Every ngym environment ships ``data/example.jsonl`` (rows) and ``data/example_rollouts.jsonl`` (one recorded
rollout per row with the reward it must get): ``ngym validate``, ``profile``, ``rollout --model replay`` and
``containerize --run`` read them (``ngym.examples``). A verifiers environment ships none, so they are made here,
into ``<records>/<name>/data/``, the folder the plugin registers the environment with:

- a **row** per task of the environment's own dataset (its first ``worker.EXAMPLES``: a v1 ``Taskset``'s tasks,
  a <= 0.3 environment's ``eval_dataset``/``dataset`` rows): ``{"verifiers": {"idx": N}}`` (what
  ``/seed_session`` seeds from) and ``responses_create_params`` holding the task's prompt as Responses input and
  the environment's tools as function tools, so a model sees what verifiers would show it;
- a **recorded rollout** per row: the task's reference ``answer`` (when the task has one; else an empty
  message) as the model's whole reply, no tool calls, and the reward the environment's **own** reward
  functions gave that reply at install, through the same worker, seed and ``/verify`` path the server uses.

So the recorded reward is what verifiers computes for the reference answer, not a judgement of ngym's: replaying
it checks that serving gives the same score again (and that the environment scores deterministically). A row
whose scoring failed at install has no recorded rollout, and ``ngym install`` says why.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ngym_verifiers import records
from ngym_verifiers.messages import chat_messages, output_text
from ngym_verifiers.process import Worker, WorkerError

ROWS = "example.jsonl"
ROLLOUTS = "example_rollouts.jsonl"


@dataclass
class Examples:
    """What ``ngym install`` recorded: rows, recorded rollouts, and why any row has none."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


folder_of = records.folder_of


def function_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The environment's tools as Responses function tools (the schema verifiers' tool server advertises)."""
    return [
        {
            "type": "function",
            "name": tool["name"],
            "description": tool.get("description") or "",
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            "strict": False,
        }
        for tool in tools
    ]


def responses_input(prompt: Any) -> list[dict[str, Any]]:
    """A task's prompt (chat messages, or one user text) as Responses input messages (text parts joined)."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = []
    for message in prompt or []:
        if isinstance(message, dict) and message.get("role") in ("system", "developer", "user", "assistant"):
            messages.append({"role": message["role"], "content": output_text(message.get("content"))})
    return messages


def example_row(example: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """One dataset row: the seed (the task's idx) and the request a model is sent."""
    params: dict[str, Any] = {"input": responses_input(example.get("prompt"))}
    if tools:
        params["tools"] = function_tools(tools)
    return {"verifiers": dict(example["seed"]), "responses_create_params": params}


def answer_response(answer: str | None, index: int) -> dict[str, Any]:
    """A finished Responses object whose output is one assistant message with the reference answer."""
    text = answer or ""
    message = {
        "type": "message",
        "id": f"msg_example_{index}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return {
        "id": f"resp_example_{index}",
        "created_at": 0.0,
        "model": "reference-answer",
        "object": "response",
        "output": [message],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


async def record(worker: Worker, described: dict[str, Any]) -> Examples:
    """Rows and recorded rollouts of the examples ``describe`` returned, scored by the environment's own
    reward functions through ``worker`` (seed, verify, close: the server's path)."""
    made = Examples()
    tools = list(described.get("tools") or [])
    for index, example in enumerate(described.get("examples") or []):
        row = example_row(example, tools)
        made.rows.append(row)
        response = answer_response(example.get("answer"), index)
        session = f"ngym-install-example-{index}"
        try:
            await worker.ask("seed", session=session, row=example["seed"])
            scored = await worker.ask("verify", session=session, messages=chat_messages(response["output"]))
        except WorkerError as exc:
            made.problems.append(f"task {index}: {exc}")
            continue
        finally:
            with contextlib.suppress(WorkerError):  # a dead worker holds nothing to close
                await worker.ask("close", session=session)
        made.rollouts.append({**row, "response": response, "reward": float(scored["reward"])})
    return made


async def describe_and_record(
    python: str, module: str, args: dict[str, Any] | None, datasets: dict[str, str] | None = None
) -> tuple[dict[str, Any], Examples]:
    """Start a worker, ask what the environment serves, record its examples, stop it (for ``ngym install``)."""
    worker = await Worker.start(python, module, args, datasets)
    try:
        described = await worker.ask("describe")
        described["api"] = worker.api
        return described, await record(worker, described)
    finally:
        await worker.stop()


def write(name: str, made: Examples) -> Path:
    """Write the environment's ``data/`` (replacing what an earlier install wrote); its folder."""
    folder = folder_of(name)
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    for filename, lines in ((ROWS, made.rows), (ROLLOUTS, made.rollouts)):
        path = data / filename
        if lines:
            path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        else:
            path.unlink(missing_ok=True)  # an old file would be examples of what is no longer installed
    return folder


def remove(name: str) -> None:
    shutil.rmtree(folder_of(name), ignore_errors=True)
