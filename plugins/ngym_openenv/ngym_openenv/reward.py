"""The episode's reward: OpenEnv gives a reward per observation; ``/verify`` gives one per rollout.

The rule is per environment (``reward_rule`` in its config, chosen at install, default ``last``):

- ``last``: the reward of the last ``step`` — the usual meaning for environments that score at the end (and the
  only one for single-step environments, where it is the step's reward);
- ``sum``: the sum of every ``step``'s reward (``None`` rewards skipped), for environments that pay per step;
- ``state:<field>``: what the environment itself declares, the numeric ``<field>`` of its ``state`` at verify
  time (e.g. ``state:total_reward``).

The reward is passed through unscaled, as the environment computed it. When the rule finds no reward (no step
was taken, the last step's reward is ``None``, the state lacks the field), there is nothing to measure: verify
answers ``reward: 0.0`` with ``mask_sample: true`` and says why, never a silent 0.
"""

from __future__ import annotations

import math
from typing import Any

RULES = ("last", "sum", "state:<field>")


class NoReward(Exception):
    """The rule found no reward to give (the message says why)."""


def check_rule(rule: str) -> str:
    """``rule`` if it is one of ``RULES``, else ``ValueError`` naming them."""
    if rule in ("last", "sum") or (rule.startswith("state:") and rule.removeprefix("state:").strip()):
        return rule
    raise ValueError(f"unknown reward rule {rule!r}: use one of {', '.join(RULES)}")


def episode_reward(rule: str, step_rewards: list[float | None], state: dict[str, Any] | None = None) -> float:
    """The episode's reward under ``rule`` from the rewards of its steps (and its state, for ``state:``)."""
    check_rule(rule)
    if rule.startswith("state:"):
        field = rule.removeprefix("state:").strip()
        value = (state or {}).get(field)
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise NoReward(f"the environment's state has no finite number {field!r} (got {value!r})")
        return float(value)
    if not step_rewards:
        raise NoReward("no step was taken, so the episode has no reward")
    if rule == "last":
        last = step_rewards[-1]
        if last is None:
            raise NoReward("the last step's observation carries no reward")
        return float(last)
    given = [r for r in step_rewards if r is not None]
    if not given:
        raise NoReward("no step's observation carried a reward")
    return float(sum(given))
