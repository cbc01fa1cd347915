"""Gymnasium-style environments (NeMo Gym's ``/reset`` + ``/step``) as the fronts' episodes: what ORS's and
OpenEnv's fronts share.

Such an environment has no ``/seed_session`` and no ``/verify``: an episode is ``POST /reset`` with the row, then
one ``POST /step`` per model turn (the turn's Responses items), each answering ``{observation, reward,
terminated, truncated, info}``; the episode's reward is the sum of the steps' (``ngym.rollout.gymnasium`` drives
it the way NeMo Gym's gymnasium agent does). A front maps its actions onto steps:

- its reset is ``/reset`` with the row; a non-empty reset observation is shown with the prompt;
- a tool call is one step whose turn is that one ``function_call`` (the tools are those the row declares: the
  environment runs them inside ``/step``); its output is the step's ``info.tool_outputs`` for the call, else the
  observation;
- a final answer is one step whose turn is an assistant message with the answer; its output is the observation
  (the environment's next user message), so a multi-turn conversation is several answers;
- the step that says ``terminated`` or ``truncated`` ends the episode and carries the episode's reward (the sum);
  earlier steps carry none (their own in ``metadata.step_reward``), so the last reward and the sum of the
  rewards a client sees are both NeMo Gym's episode reward. A failed step ends the episode with no reward;
- ``/close`` is sent at the end when the reset said ``supports_explicit_close``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

RESET, STEP, CLOSE = "/reset", "/step", "/close"


def is_gymnasium_app(app: FastAPI) -> bool:
    """Whether ``app`` speaks ``/reset`` + ``/step`` instead of seed/verify (as ``ngym.rollout.gymnasium`` tells a
    server at a URL apart, from its routes)."""
    posts = {r.path for r in app.router.routes if isinstance(r, APIRoute) and "POST" in (r.methods or set())}
    return RESET in posts and STEP in posts and "/seed_session" not in posts


@dataclass
class GymEpisode:
    """What a Gymnasium episode adds to a front's episode: what its reset said, and the reward so far."""

    observation: str
    explicit_close: bool
    idempotent: bool
    total: float = 0.0
    steps: int = 0
    closed: bool = False


@dataclass
class StepResult:
    """One step, read: the text the client sees, whether the episode ended, and its reward if it did."""

    text: str
    done: bool
    reward: float | None
    metadata: dict[str, Any] = field(default_factory=dict)


def observation_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def after_reset(answer: Any) -> GymEpisode:
    """The episode a successful ``/reset`` answer opens."""
    data = answer if isinstance(answer, dict) else {}
    info = _info(data)
    return GymEpisode(
        observation=observation_text(data.get("observation")),
        explicit_close=info.get("supports_explicit_close") is True,
        idempotent=info.get("supports_step_idempotency") is True,
    )


def call_item(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
        "arguments": json.dumps(arguments), "status": "completed",
    }  # fmt: skip


def message_item(text: str, number: int) -> dict[str, Any]:
    return {
        "type": "message", "id": f"msg_{number}", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }  # fmt: skip


def step_body(row: dict[str, Any], gym: GymEpisode, items: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """The ``/step`` body for a turn of ``items``: the row and the turn as a Responses object."""
    params = row.get("responses_create_params") or {}
    response = {
        "id": f"resp_{uuid.uuid4().hex}", "created_at": time.time(), "model": str(params.get("model") or model),
        "object": "response", "output": items, "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": params.get("tools") or [], "status": "completed",
    }  # fmt: skip
    body: dict[str, Any] = {**row, "response": response}
    if gym.idempotent:
        body["_ng_step_request_id"] = uuid.uuid4().hex
    gym.steps += 1
    return body


def read_step(gym: GymEpisode, status: int, answer: Any, raw: str, items: list[dict[str, Any]]) -> StepResult:
    """What a ``/step`` answer means for the client (a failed step: the episode ends with no reward)."""
    if status >= 400:
        return StepResult(
            f"step failed (HTTP {status})", True, None, {"mask_sample": True, "failure_reason": raw[:2000]}
        )
    data = answer if isinstance(answer, dict) else {}
    reward = data.get("reward")
    step_reward = float(reward) if isinstance(reward, int | float) and not isinstance(reward, bool) else 0.0
    gym.total += step_reward
    done = bool(data.get("terminated") or data.get("truncated"))
    info = _info(data)
    call_ids = {item.get("call_id") for item in items if item.get("type") == "function_call"}
    outputs = [
        str(out.get("output"))
        for out in info.get("tool_outputs") or []
        if isinstance(out, dict) and out.get("call_id") in call_ids
    ]
    text = "\n".join(outputs) or observation_text(data.get("observation"))
    metadata = {
        "step_reward": step_reward,
        "terminated": bool(data.get("terminated")),
        "truncated": bool(data.get("truncated")),
    }
    if done:
        return StepResult(text or f"The episode is over. Reward: {gym.total}", True, gym.total, metadata)
    return StepResult(text, False, None, metadata)


def _info(data: dict[str, Any]) -> dict[str, Any]:
    info = data.get("info")
    return info if isinstance(info, dict) else {}
