"""The ORS episode as NeMo Gym's wire would have sent it to ``/verify``, and a verify answer as an ORS reward.

NeMo Gym's agent records each tool call as a ``function_call`` item followed by a ``function_call_output``
item holding the tool route's response body as text, and the model's last turn as an assistant ``message``
with one ``output_text`` part. ``response`` builds exactly that from the calls an ORS client made, so
``/verify`` scores the same trajectory the same whichever wire carried it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ngym.server.protocol.failure_kinds import SESSION_LOST


@dataclass(frozen=True)
class Step:
    """One tool call of the episode: the tool, its arguments (as the JSON text the trajectory holds), and the text
    the tool route answered."""

    name: str
    arguments: str
    output: str


def response(steps: list[Step], final_text: str, row: dict[str, Any], response_id: str) -> dict[str, Any]:
    """The Responses object of an episode: its calls and their outputs, in order, then the final message; without
    its last two fields, ``tools`` (the row's) and ``status`` (``"completed"``), which ``rows.RowFacts.verify_body``
    adds (the tools encoded once per row)."""
    output: list[dict[str, Any]] = []
    for index, step in enumerate(steps):
        call_id = f"call_{index}"
        output.append(
            {
                "type": "function_call", "id": f"fc_{index}", "call_id": call_id, "name": step.name,
                "arguments": step.arguments, "status": "completed",
            }
        )  # fmt: skip
        output.append({"type": "function_call_output", "call_id": call_id, "output": step.output})
    output.append(
        {
            "type": "message", "id": "msg_final", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": final_text, "annotations": []}],
        }
    )  # fmt: skip
    params = row.get("responses_create_params") or {}
    return {
        "id": response_id, "created_at": time.time(), "model": str(params.get("model") or "ors-client"),
        "object": "response", "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
    }  # fmt: skip


def is_masked(verified: dict[str, Any]) -> bool:
    """Whether a verify answer is masked (``mask_sample``, top level or in ``instance_config``): no reward."""
    if verified.get("mask_sample") is True:
        return True
    config = verified.get("instance_config")
    return isinstance(config, dict) and config.get("mask_sample") is True


def reward_of(verified: dict[str, Any]) -> float | None:
    """The ORS reward of a verify answer: its ``reward``, or None (no reward) when masked or not a number."""
    if is_masked(verified):
        return None
    reward = verified.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return None
    return float(reward)


def outcome_metadata(verified: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """What the verify answer adds to the row (judge evaluations, parsed answers, failure kinds), for
    ``ToolOutput.metadata``; the echoed row, request and trajectory are left out (the reward has its own field)."""
    echoed = ("response", "responses_create_params", "reward")
    return {k: v for k, v in verified.items() if k not in echoed and (k not in row or row[k] != v)}


def lost_metadata(detail: str) -> dict[str, Any]:
    return {"mask_sample": True, "failure_kind": SESSION_LOST, "failure_reason": detail}
