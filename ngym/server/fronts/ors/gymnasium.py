"""A Gymnasium-style environment's episode over ORS (``ngym.server.fronts.gymnasium`` says how actions map to
steps): ``create`` resets, a tool call or ``submit_answer`` is one step, and the step that ends the episode answers
``finished: true`` with the episode's reward (ORS's outcome-only convention: earlier steps ``reward: null``)."""

from __future__ import annotations

import json
from typing import Any

from ngym.server.fronts.gymnasium import CLOSE, RESET, STEP, GymEpisode, after_reset, read_step, step_body
from ngym.server.fronts.ors import inprocess, wire
from ngym.server.protocol.failure_kinds import VERIFIER_ERROR


async def reset(app: Any, row: dict[str, Any]) -> tuple[inprocess.Answer, GymEpisode | None]:
    """``POST /reset`` with the row; its answer, and the episode when it succeeded."""
    answer = await inprocess.post(app, RESET, json.dumps(row).encode())
    if answer.status >= 400:
        return answer, None
    return answer, after_reset(json.loads(answer.body or b"{}"))


async def step(
    app: Any, row: dict[str, Any], gym: GymEpisode, cookie: bytes, items: list[dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """One step with the turn ``items``; the ``RunToolOutput`` answer and whether the episode is over."""
    body = json.dumps(step_body(row, gym, items, "ors-client")).encode()
    answer = await inprocess.post(app, STEP, body, cookie)
    try:
        parsed = json.loads(answer.body or b"{}")
    except ValueError:
        parsed = None
    result = read_step(gym, answer.status, parsed, answer.text, items)
    if result.metadata.get("mask_sample"):
        result.metadata["failure_kind"] = VERIFIER_ERROR
    return wire.tool_success(
        result.text, reward=result.reward, finished=result.done, metadata=result.metadata
    ), result.done


async def close(app: Any, gym: GymEpisode, cookie: bytes) -> inprocess.Answer | None:
    """``POST /close`` when the environment asked for it (it frees a slot); else nothing to do."""
    if not gym.explicit_close:
        return None
    return await inprocess.post(app, CLOSE, b"{}", cookie)
