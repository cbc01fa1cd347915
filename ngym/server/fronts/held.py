"""What an episode of the OpenEnv or ORS front holds in the server: its trajectory, every tool call's arguments and
answer, kept until the episode ends to build its ``/verify``.

On NeMo Gym's wire the client keeps the trajectory; behind these fronts the server does, so it is bounded as what a
session may send is: a call whose arguments pass ``max_tool_call_bytes`` is refused without running and not kept
(the tool's route would refuse it anyway), and the whole trajectory holds at most ``max_session_tool_bytes``, and
never more than ``max_request_body_bytes`` (it is sent whole in the verify body). A call that would pass that is
refused without running, an answer that would is kept as a short note saying so; the episode can still finish and
be verified. Without this bound, calls the route refused were kept whole all the same: 30 steps of 8 MB over the
OpenEnv front held 276 MB in one episode, and its verify could not be sent.
"""

from __future__ import annotations

import json
from typing import Any

from ngym.server.pipeline.session_budget import call_too_large


def size_of(text: str) -> int:
    """Bytes of ``text`` as UTF-8 (lone surrogates as their escape's worth)."""
    return len(text.encode("utf-8", "surrogatepass"))


def arguments_text(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments)


def trajectory_limit(config: Any) -> int:
    """The most bytes of calls and answers an episode's trajectory holds, from the server's config."""
    return min(int(config.max_session_tool_bytes), int(config.max_request_body_bytes))


def call_refused(held: int, size: int, config: Any) -> str | None:
    """Why a call whose arguments take ``size`` bytes is not run nor kept in a trajectory holding ``held`` (None:
    it is run)."""
    if size > config.max_tool_call_bytes:
        return call_too_large(size, config.max_tool_call_bytes) + ". The call was not run"
    limit = trajectory_limit(config)
    if held + size <= limit:
        return None
    return (
        f"this episode holds {held} bytes of tool calls and answers and this call's arguments take {size}; an "
        f"episode may hold at most {limit} bytes (server settings max_session_tool_bytes, max_request_body_bytes). "
        "The call was not run; finish the episode, or start a new one"
    )


def answer_kept(held: int, text: str, config: Any) -> str:
    """The answer as the trajectory keeps it: ``text``, or a note when it would take the trajectory past its limit."""
    size, limit = size_of(text), trajectory_limit(config)
    if held + size <= limit:
        return text
    return json.dumps(
        {
            "detail": f"the tool's answer ({size} bytes) is not kept: this episode holds {held} bytes of tool calls "
            f"and answers, at most {limit} (server settings max_session_tool_bytes, max_request_body_bytes)"
        }
    )
