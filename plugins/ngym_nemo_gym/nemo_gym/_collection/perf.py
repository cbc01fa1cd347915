"""``ng_perf``: one rollout's turns, tool calls and tokens, summed from its ``ng_trajectory``.

Only when the run has observability on and the trajectory holds at least one agent invocation; otherwise the
result gets no ``ng_perf`` at all (a partial guess would read as a measurement). Tokens are summed over the model
calls the invocations reference, each physical call counted once; ``token_observability_coverage`` says what
share of the turns found their call (a turn whose call is missing or ambiguous adds no tokens).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from nemo_gym._collection.records import NG_PERF_KEY, NG_TRAJECTORY_KEY
from nemo_gym.rollout_observability import ModelCallRef, TrajectoryModelCall, TrajectoryRecord

log = logging.getLogger("ngym.nemo.collection")

#: ng_perf key → TrajectoryTokenStats field
_TOKEN_FIELDS = {
    "prompt_tokens": "prompt_tokens",
    "cached_prompt_tokens": "cached_tokens",
    "completion_tokens": "completion_tokens",
    "reasoning_tokens": "reasoning_tokens",
}


def attach_ng_perf(
    result: dict[str, Any], *, observability_enabled: bool, rollout_latency_ms: float | None = None
) -> None:
    """Set ``result["ng_perf"]`` when observability is on and the trajectory allows (see the module docstring);
    an unreadable trajectory is logged, never raised: the rollout's score does not depend on it."""
    if not observability_enabled:
        return
    try:
        perf = build_ng_perf(result, rollout_latency_ms=rollout_latency_ms)
    except Exception:
        log.warning("Could not assemble ng_perf for a rollout.", exc_info=True)
        return
    if perf is not None:
        result[NG_PERF_KEY] = perf


def build_ng_perf(result: dict[str, Any], *, rollout_latency_ms: float | None) -> dict[str, Any] | None:
    raw = result.get(NG_TRAJECTORY_KEY)
    if not isinstance(raw, dict):
        return None
    try:
        trajectory = TrajectoryRecord.model_validate(raw)
    except ValueError:
        return None
    if not trajectory.invocations:
        return None

    match = _CallIndex(trajectory.model_calls)
    claimed: set[int] = set()  # a physical call is owned once, even when two invocations reference it
    owned: list[TrajectoryModelCall] = []
    owned_by_invocation: Counter[str] = Counter()
    for invocation in trajectory.invocations:
        for ref in invocation.model_calls:
            position = match(ref)
            if position is None or position in claimed:
                continue
            claimed.add(position)
            owned.append(trajectory.model_calls[position])
            owned_by_invocation[invocation.invocation_id] += 1

    turns = Counter(turn.invocation_id for turn in trajectory.turns)
    tools = Counter(tool.invocation_id for tool in trajectory.tool_calls)
    # An invocation's turns: as recorded, else one per owned call, else one (it ran).
    num_turns = sum(turns[i.invocation_id] or owned_by_invocation[i.invocation_id] or 1 for i in trajectory.invocations)
    perf: dict[str, Any] = {
        "num_turns": num_turns,
        "num_tool_calls": sum(tools[i.invocation_id] for i in trajectory.invocations),
        "token_observability_coverage": min(1.0, len(owned) / num_turns),
    }
    for key, field in _TOKEN_FIELDS.items():
        values = [getattr(call.token_stats, field) for call in owned]
        present = [value for value in values if value is not None]
        if present:
            perf[key] = sum(present)
    if isinstance(rollout_latency_ms, int | float):
        perf["total_latency_ms"] = rollout_latency_ms
    return perf


class _CallIndex:
    """Finds the one captured call a :class:`ModelCallRef` names: by ``model_call_id`` (checked against any
    model and response id the ref also gives), else by (model server, response id); ambiguous is no match."""

    def __init__(self, calls: list[TrajectoryModelCall]) -> None:
        self.calls = calls
        self.by_id: dict[str, list[int]] = {}
        self.by_response: dict[tuple[str, str, str], list[int]] = {}
        for position, call in enumerate(calls):
            if call.model_call_id:
                self.by_id.setdefault(call.model_call_id, []).append(position)
            meta = call.response_metadata
            if meta.model_ref is not None and meta.response_id:
                key = (meta.model_ref.type, meta.model_ref.name, meta.response_id)
                self.by_response.setdefault(key, []).append(position)

    def __call__(self, ref: ModelCallRef) -> int | None:
        if ref.model_call_id:
            candidates = [
                p
                for p in self.by_id.get(ref.model_call_id, [])
                if (ref.model_ref is None or ref.model_ref == self.calls[p].response_metadata.model_ref)
                and (ref.response_id is None or ref.response_id == self.calls[p].response_metadata.response_id)
            ]
        elif ref.model_ref is not None and ref.response_id:
            candidates = self.by_response.get((ref.model_ref.type, ref.model_ref.name, ref.response_id), [])
        else:
            candidates = []
        return candidates[0] if len(candidates) == 1 else None
