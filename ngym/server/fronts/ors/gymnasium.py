"""A Gymnasium-style environment's episode over ORS (``ngym.server.fronts.gymnasium`` says how actions map to
steps): ``create`` resets, a tool call or ``submit_answer`` is one step, and the step that ends the episode answers
``finished: true`` with the episode's reward (ORS's outcome-only convention: earlier steps ``reward: null``)."""

from __future__ import annotations

from typing import Any

from ngym.server.fronts.gymnasium import CLOSE, RESET, STEP, GymEpisode, after_reset, read_step, step_body
from ngym.server.fronts.inprocess import Answer, RolloutSession
from ngym.server.fronts.ors import wire
from ngym.server.protocol.failure_kinds import VERIFIER_ERROR


async def reset(session: RolloutSession, row: Any) -> tuple[Answer, GymEpisode | None]:
    """``POST /reset`` with the row; its answer, and the episode when it succeeded."""
    answer = await session.post(RESET, row)
    if answer.status >= 400:
        return answer, None
    return answer, after_reset(_json(answer))


async def step(
    session: RolloutSession, row: dict[str, Any], gym: GymEpisode, items: list[dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """One step with the turn ``items``; the ``RunToolOutput`` answer and whether the episode is over."""
    answer = await session.post(STEP, step_body(row, gym, items, "ors-client"))
    result = read_step(gym, answer.status, _json(answer), answer.text, items)
    if result.metadata.get("mask_sample"):
        result.metadata["failure_kind"] = VERIFIER_ERROR
    output = wire.tool_success(result.text, reward=result.reward, finished=result.done, metadata=result.metadata)
    return output, result.done


async def close(session: RolloutSession, gym: GymEpisode) -> Answer | None:
    """``POST /close`` when the environment asked for it (it frees a slot); the session is let go either way."""
    answer = await session.post(CLOSE, {}) if gym.explicit_close and session.live else None
    session.forget()
    return answer


def _json(answer: Answer) -> Any:
    try:
        return answer.json()
    except ValueError:
        return None
