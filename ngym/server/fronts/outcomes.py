"""Tool answers that carry their own outcome, read for the ORS and OpenEnv fronts.

A server with ``tool_outcomes`` (an installed ORS environment: ``ngym install ors:``) answers each tool route with
``{"output": text, "reward": r, "finished": f}``, or ``{"output": text, "is_error": true, "reason": why}`` for a
call the environment refused (``reason``: ORS's ``not_found`` / ``input_validation`` / ``episode_finished``, or
``raised`` for a tool that raised). Over ORS such a call is what ``openreward``'s own server answers: the output
as text, a refusal as ``RunToolError`` with its reason, a tool that raised as the stream's error event; over
OpenEnv the output is the observation's result, a refusal its error. On both, a ``finished`` output ends the
episode (its reward is then ``/verify``'s: one reward path).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: ORS's reasons for a refused call (``RunToolError.reason``)
REASONS = frozenset({"not_found", "name_collision", "input_validation", "episode_finished"})
RAISED = "raised"


@dataclass
class Outcome:
    text: str
    finished: bool = False
    #: why the call was refused (an ORS ``RunToolError.reason``, or ``raised``); None when it ran
    refused: str | None = None


def read(body: str) -> Outcome | None:
    """The outcome in a tool route's answer, or None when the answer is not of that shape."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("output"), str):
        return None
    if data.get("is_error"):
        reason = data.get("reason")
        refused = reason if reason in REASONS or reason == RAISED else "input_validation"
        return Outcome(data["output"], refused=refused)
    return Outcome(data["output"], finished=data.get("finished") is True)
