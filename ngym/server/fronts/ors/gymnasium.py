"""Gymnasium-style environments (NeMo Gym's ``/reset`` + ``/step``) as ORS sessions.

Such an environment has no ``/seed_session`` and no ``/verify``: an episode is ``POST /reset`` with the row, then
one ``POST /step`` per model turn (the turn's Responses items), each answering ``{observation, reward,
terminated, truncated, info}``; the episode's reward is the sum of the steps' (``ngym.rollout.gymnasium`` drives
it the way NeMo Gym's gymnasium agent does). Over ORS:

- ``create`` is ``/reset`` with the task (the row); a non-empty reset observation is added to the prompt;
- a tool call is one step whose turn is that one ``function_call`` (the tools are those the row declares: the
  environment runs them inside ``/step``); its output is the step's ``info.tool_outputs`` for the call, else the
  observation;
- ``submit_answer(answer)`` is one step whose turn is an assistant message with the answer; its output is the
  observation (the environment's next user message), so a multi-turn conversation is several answers;
- a step that says ``terminated`` or ``truncated`` ends the episode: ``finished: true`` and, as ORS's
  outcome-only convention wants, ``reward`` = the episode's reward (the sum); earlier steps carry ``reward: null``
  and their own reward in ``metadata.step_reward``. A failed step ends the episode with no reward (masked).
- ``/close`` is sent at the end when the reset said ``supports_explicit_close``.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from ngym.rollout.gymnasium import CLOSE, RESET, STEP, is_gymnasium_style
from ngym.server.fronts.ors import inprocess, wire
from ngym.server.protocol.failure_kinds import VERIFIER_ERROR


def is_gymnasium_app(app: FastAPI) -> bool:
    """Whether ``app`` speaks ``/reset`` + ``/step`` instead of seed/verify."""
    posts = [r.path for r in app.router.routes if isinstance(r, APIRoute) and "POST" in (r.methods or set())]
    return is_gymnasium_style(posts)


@dataclass
class GymEpisode:
    """What a Gymnasium episode adds to an ORS episode: what its reset said, and the reward so far."""

    observation: str
    explicit_close: bool
    idempotent: bool
    total: float = 0.0
    steps: int = 0


def _observation_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


async def reset(app: Any, row: dict[str, Any]) -> tuple[inprocess.Answer, GymEpisode | None]:
    """``POST /reset`` with the row; its answer, and the episode when it succeeded."""
    answer = await inprocess.post(app, RESET, json.dumps(row).encode())
    if answer.status >= 400:
        return answer, None
    data = json.loads(answer.body or b"{}")
    data = data if isinstance(data, dict) else {}
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    return answer, GymEpisode(
        observation=_observation_text(data.get("observation")),
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


def _step_body(row: dict[str, Any], gym: GymEpisode, items: list[dict[str, Any]]) -> bytes:
    params = row.get("responses_create_params") or {}
    response = {
        "id": f"resp_ors_{uuid.uuid4().hex}", "created_at": time.time(),
        "model": str(params.get("model") or "ors-client"), "object": "response", "output": items,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": params.get("tools") or [], "status": "completed",
    }  # fmt: skip
    body: dict[str, Any] = {**row, "response": response}
    if gym.idempotent:
        body["_ng_step_request_id"] = uuid.uuid4().hex
    return json.dumps(body).encode()


async def step(
    app: Any, row: dict[str, Any], gym: GymEpisode, cookie: bytes, items: list[dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """One step with the turn ``items``; the ``RunToolOutput`` answer and whether the episode is over."""
    answer = await inprocess.post(app, STEP, _step_body(row, gym, items), cookie)
    gym.steps += 1
    if answer.status >= 400:
        metadata = {"mask_sample": True, "failure_kind": VERIFIER_ERROR, "failure_reason": answer.text[:2000]}
        return wire.tool_success(f"step failed (HTTP {answer.status})", reward=None, finished=True, metadata=metadata), True
    data = json.loads(answer.body or b"{}")
    data = data if isinstance(data, dict) else {}
    reward = data.get("reward")
    step_reward = float(reward) if isinstance(reward, int | float) and not isinstance(reward, bool) else 0.0
    gym.total += step_reward
    done = bool(data.get("terminated") or data.get("truncated"))
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    call_ids = {item.get("call_id") for item in items if item.get("type") == "function_call"}
    outputs = [
        str(out.get("output"))
        for out in info.get("tool_outputs") or []
        if isinstance(out, dict) and out.get("call_id") in call_ids
    ]
    text = "\n".join(outputs) or _observation_text(data.get("observation"))
    metadata = {
        "step_reward": step_reward,
        "terminated": bool(data.get("terminated")),
        "truncated": bool(data.get("truncated")),
    }
    if done:
        return wire.tool_success(
            text or f"The episode is over. Reward: {gym.total}", reward=gym.total, finished=True, metadata=metadata
        ), True
    return wire.tool_success(text, reward=None, finished=False, metadata=metadata), False


async def close(app: Any, gym: GymEpisode, cookie: bytes) -> inprocess.Answer | None:
    """``POST /close`` when the environment asked for it (it frees a slot); else nothing to do."""
    if not gym.explicit_close:
        return None
    return await inprocess.post(app, CLOSE, b"{}", cookie)
