"""An offline, OpenAI-Responses-compatible model that replays recorded rollouts (``ngym replay-model``).

``POST /v1/responses`` is matched to its dataset row by the row's input messages (role + text of each
item: the request's input starts with them; the rest is the agent's trajectory so far). The reply is the
row's next recorded model turn, chosen by how many environment items (tool outputs; a Gymnasium-style
environment's observations, as user messages) the input already holds:

- a row with a recorded ``response`` (``data/example_rollouts.jsonl``) replays its output turn by turn —
  each run of model items between the environment's items, then the final message;
- a row with only ``ground_truth`` calls (``[{"name", "arguments"}]``) asks for them one at a time, then
  says "Done.".

A request whose input carries a judge prompt (``<answer_a>``/``<answer_b>``) is answered by the scripted
judge instead, on ``/v1/responses`` and ``/v1/chat/completions``. ``GET /v1/models`` lists ``replay``.
So the whole loop (environment, model, judge) runs with no GPU and no network.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ngym.examples import read_jsonl
from ngym.rollout.gymnasium import is_env_item
from ngym.rollout.scripted_judge import ScriptedJudge
from ngym.targets import resolve

REPLAY_MODEL_NAME = "replay"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in content]
        return "".join(part for part in parts if isinstance(part, str))
    return ""


def _as_items(value: Any) -> list[Any]:
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value or [])


def _canonical(item: Any) -> Any:
    """What identifies an input item for matching (ids, statuses and content-part shapes ignored)."""
    if not isinstance(item, dict):
        return str(item)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return ["message", item.get("role"), _text(item.get("content"))]
    if kind == "function_call":
        return ["function_call", item.get("name"), item.get("arguments")]
    if kind == "function_call_output":
        return ["function_call_output", item.get("output") if isinstance(item.get("output"), str) else ""]
    return [str(kind)]


def index_key_items(items: Iterable[Any]) -> list[Any]:
    """Input items as the replay model compares them (role and text; ids and content-part shapes ignored)."""
    return [_canonical(i) for i in items]


def input_key(items: Iterable[Any]) -> str:
    blob = json.dumps(index_key_items(items), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class ReplayPlan:
    """A row's model turns, in order; ``source`` is ``recorded`` or ``ground_truth``."""

    turns: list[list[dict[str, Any]]]
    source: str
    row_index: int
    #: environment items (tool outputs; observations, as user messages) preceding each turn
    tool_outputs_before: list[int] = field(default_factory=list)

    def next_turn(self, tool_outputs_seen: int) -> list[dict[str, Any]]:
        for turn, before in zip(self.turns, self.tool_outputs_before, strict=True):
            if before >= tool_outputs_seen:
                return turn
        last = self.turns[-1] if self.turns else []
        if last and not any(i.get("type") == "function_call" for i in last):
            return last  # asked again after the end: the final message again
        return [_message("(replay finished: nothing more was recorded)")]


def _message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def plan_for(row: dict[str, Any], row_index: int) -> ReplayPlan | None:
    """The replay plan of a dataset row: its recorded response, else its ground-truth calls, else None."""
    response = row.get("response")
    if isinstance(response, dict) and isinstance(response.get("output"), list):
        turns: list[list[dict[str, Any]]] = []
        before: list[int] = []  # tool outputs recorded before each turn
        current: list[dict[str, Any]] = []
        outputs = 0
        for item in response["output"]:
            if not isinstance(item, dict):
                continue
            if is_env_item(item):  # a tool's output, or an observation (a Gymnasium-style environment's user message)
                if current:
                    turns.append(current)
                    current = []
                outputs += 1
                continue
            if not current:
                before.append(outputs)
            current.append(item)
        if current:
            turns.append(current)
        return ReplayPlan(turns=turns, source="recorded", row_index=row_index, tool_outputs_before=before)
    truth = row.get("ground_truth")
    if isinstance(truth, list):
        turns = []
        for index, call in enumerate(truth):
            if not isinstance(call, dict) or "name" not in call:
                return None
            arguments = call.get("arguments", {})
            turns.append(
                [
                    {
                        "type": "function_call",
                        "id": f"fc_gt_{index}",
                        "call_id": f"call_gt_{index}",
                        "name": call["name"],
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                        "status": "completed",
                    }
                ]
            )
        turns.append([_message("Done.")])
        return ReplayPlan(
            turns=turns, source="ground_truth", row_index=row_index, tool_outputs_before=list(range(len(turns)))
        )
    return None


class ReplayIndex:
    """Rows by the key of their input; a recorded response wins over ground truth for the same input."""

    def __init__(self) -> None:
        self.plans: dict[str, ReplayPlan] = {}
        self.lengths: set[int] = set()

    def add_rows(self, rows: Iterable[dict[str, Any]]) -> int:
        added = 0
        for index, row in enumerate(rows):
            params = row.get("responses_create_params") or {}
            plan = plan_for(row, index)
            if plan is None or "input" not in params:
                continue
            items = _as_items(params["input"])
            key = input_key(items)
            existing = self.plans.get(key)
            if existing is None or (existing.source == "ground_truth" and plan.source == "recorded"):
                self.plans[key] = plan
                self.lengths.add(len(items))
                added += 1
        return added

    def match(self, items: list[Any]) -> tuple[ReplayPlan, list[Any]] | None:
        """The plan whose row input is the longest prefix of ``items``, and the rest of ``items``."""
        for length in sorted(self.lengths, reverse=True):
            if length <= len(items):
                plan = self.plans.get(input_key(items[:length]))
                if plan is not None:
                    return plan, items[length:]
        return None


def environment_items_seen(trajectory: list[Any]) -> int:
    """How many environment items (tool outputs, observations) the agent's trajectory holds after the model's
    first turn: that many were recorded before the turn to give next. (A Gymnasium environment's opening
    observation comes before any model item; the recording keeps it in the input, not in the output.)"""
    first = next((n for n, item in enumerate(trajectory) if isinstance(item, dict) and not is_env_item(item)), None)
    if first is None:
        return 0
    return sum(1 for item in trajectory[first:] if is_env_item(item))


def input_items(row: dict[str, Any]) -> list[Any]:
    """A dataset row's input items, as the replay model matches them."""
    return _as_items((row.get("responses_create_params") or {}).get("input"))


def read_rows(paths: Iterable[Path]) -> list[dict[str, Any]]:
    return [row for path in paths for row in read_jsonl(Path(path))]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error", "code": None}}, status_code=status
    )


def create_replay_app(rows: Iterable[dict[str, Any]] = (), judge: ScriptedJudge | None = ScriptedJudge()) -> FastAPI:
    """The replay model as a FastAPI app (``judge=None`` turns the scripted judge off)."""
    index = ReplayIndex()
    index.add_rows(rows)
    app = FastAPI(title="ngym replay model", docs_url="/docs")
    app.state.index = index

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": REPLAY_MODEL_NAME, "object": "model", "created": 0, "owned_by": "ngym"}],
        }

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        body = await request.json()
        if body.get("stream"):
            return _error(400, "the replay model does not stream")
        items = _as_items(body.get("input"))
        prompt = "\n".join(_text(i.get("content")) for i in items if isinstance(i, dict) and "role" in i)
        if judge is not None and judge.wants(prompt):
            output = [_message(judge.verdict(prompt))]
        else:
            found = index.match(items)
            if found is None:
                return _error(
                    400,
                    "the replay model has no recording for this input: it replays only the rows it was given "
                    "(recorded responses or ground-truth calls; ngym rollout --replay-data FILE adds some); for a "
                    "Gymnasium-style environment the input includes reset's observation, which must be the recorded "
                    "one (an environment that deals at random cannot be replayed)",
                )
            plan, trajectory = found
            output = plan.next_turn(environment_items_seen(trajectory))
        return {
            "id": f"resp_{uuid.uuid4().hex}",
            "object": "response",
            "created_at": time.time(),
            "model": body.get("model") or REPLAY_MODEL_NAME,
            "status": "completed",
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "usage": {
                "input_tokens": 0,
                "output_tokens": 0,
                "total_tokens": 0,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        body = await request.json()
        prompt = "\n".join(_text(m.get("content")) for m in body.get("messages") or [] if isinstance(m, dict))
        if judge is None or not judge.wants(prompt):
            return _error(400, "the replay model answers chat completions only as a scripted judge")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or REPLAY_MODEL_NAME,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": judge.verdict(prompt)},
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    return app


def example_rollouts_of(name: str) -> Path | None:
    """An installed environment's ``data/example_rollouts.jsonl``, if it ships one."""
    return resolve(name).data_file("example_rollouts.jsonl")
