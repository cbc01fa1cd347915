"""A SkyRL environment over an ngym environment's URL: ``skyrl_gym.make("ngym", env_config={"url": URL}, extras=...)``.

Importing this module registers the ``ngym`` id with ``skyrl_gym`` (as its own environments register); SkyRL's
trainer imports it when its config names ``environment.env_class: ngym`` and this module is imported first (a
``skyrl_gym.register`` call in the entry script). One :class:`NgymEnv` is one rollout:

- ``init(prompt)`` seeds a session with the dataset row (``extras["ngym_row"]``, or ``extras["extra_info"]
  ["ngym_row"]``: a dict or its JSON text) and returns the prompt unchanged;
- ``step(action)`` reads the model's tool calls from its text (``<tool_call>{"name": ..., "arguments": {...}}
  </tool_call>``, the Hermes/Qwen format) and runs each in the session: the answers come back as ``tool``
  messages, reward 0.0, not done. A turn without a tool call is the final answer: the trajectory (the calls, their
  answers and the model's text, as NeMo Gym's agent would have sent it) is verified, the session closed, and the
  step returns the environment's reward with ``done``. Running out of turns (``max_turns``) verifies too;
- ``close()`` closes the session if a rollout stopped early.

SkyRL's step reward is a float with no "no reward": a masked verify (a lost session, a failed judge) raises
:class:`MaskedReward` (``env_config.on_masked: raise``, the default) or gives NaN (``on_masked: nan``), and is
flagged ``metadata["ngym_masked"]``; it is never a 0.0 the trainer would learn from.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from typing import Any

from ngym.train.needs import trainer_missing

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ModuleNotFoundError as missing:
    raise trainer_missing(missing, "ngym.train.skyrl", "'skyrl-gym>=0.4'") from None

from ngym.train.wire import Rollout, WireError, dataset_row, reward_of, sync_wire, visible_text

log = logging.getLogger("ngym.train")
ENV_ID = "ngym"
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class MaskedReward(RuntimeError):
    """The environment gave this rollout no reward (masked: a lost session, a failed judge)."""


def _get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def parse_tool_calls(action: str) -> tuple[str, list[tuple[str, dict[str, Any]]], list[str]]:
    """The text outside ``<tool_call>`` blocks, the calls (name, arguments) and the blocks that are not calls."""
    calls: list[tuple[str, dict[str, Any]]] = []
    bad: list[str] = []
    for block in _TOOL_CALL.findall(action):
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            bad.append(block)
            continue
        arguments = call.get("arguments", {}) if isinstance(call, dict) else None
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = None
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(arguments, dict):
            bad.append(block)
            continue
        calls.append((call["name"], arguments))
    text = visible_text(_TOOL_CALL.sub("", action))
    return text, calls, bad


class NgymEnv(BaseTextEnv):  # type: ignore[misc]
    """One rollout on an ngym environment (``env_config``: ``url``, ``max_turns``, ``timeout``, ``on_masked``)."""

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        extras = dict(extras or {})
        url = _get(env_config, "url") or extras.get("ngym_url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"ngym env: env_config.url must be the environment's http(s) URL, got {url!r}")
        raw = extras.get("ngym_row", _get(extras.get("extra_info"), "ngym_row"))
        row = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(row, Mapping) or not isinstance(row.get("responses_create_params"), Mapping):
            raise ValueError("ngym env: extras need the dataset row as ngym_row (with responses_create_params)")
        self.max_turns = int(_get(env_config, "max_turns", extras.get("max_turns", 8)))
        self.on_masked = str(_get(env_config, "on_masked", "raise"))
        self.wire = sync_wire(url, float(_get(env_config, "timeout", 120.0)))
        self.rollout = Rollout(dataset_row(row))
        self.verified: dict[str, Any] | None = None

    def init(self, prompt: Any) -> tuple[Any, dict[str, Any]]:
        """Seed the rollout's session; the prompt is the model's first input, unchanged. An environment down or
        full (unreachable, 5xx) leaves the rollout unseeded: its tools are not run and it ends masked."""
        try:
            self.wire.seed(self.rollout)
        except WireError as exc:
            if not exc.unavailable:  # the environment refused this row: a dataset error, raised
                raise
            log.warning("ngym env: %s: this rollout gets no reward", exc)
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the turn's tool calls, or verify the final answer (see the module's docstring)."""
        self.turns += 1
        text, calls, bad = parse_tool_calls(action)
        if text:
            self.rollout.add_message(text)
        observations: list[dict[str, str]] = []
        for name, arguments in calls:
            try:
                content = self.wire.call(self.rollout, name, arguments)
            except WireError as exc:  # not run (unseeded, unreachable): the rollout is marked failed, never scored
                content = json.dumps({"error": str(exc)})
            observations.append({"role": "tool", "content": content})
        for block in bad:
            observations.append(
                {"role": "tool", "content": f'{{"error": "not a tool call: {json.dumps(block)[1:-1]}"}}'}
            )
        if (calls or bad) and self.turns < self.max_turns:
            return BaseTextEnvStepOutput(observations=observations, reward=0.0, done=False, metadata={})
        return self._finish()

    def _finish(self) -> BaseTextEnvStepOutput:
        self.verified = self.wire.verify(self.rollout)
        self.wire.close(self.rollout)
        reward = reward_of(self.verified)
        metadata: dict[str, Any] = {"ngym_masked": reward is None}
        if reward is None:
            why = (self.verified or {}).get("failure_kind") or "no verify answer"
            if self.on_masked != "nan":
                raise MaskedReward(f"the environment at {self.wire.base_url} gave this rollout no reward ({why})")
            return BaseTextEnvStepOutput(observations=[], reward=math.nan, done=True, metadata=metadata)
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata=metadata)

    def close(self) -> None:
        """Close the session if the rollout stopped before its final answer (idempotent)."""
        self.wire.close(self.rollout)

    def get_metrics(self) -> dict[str, Any]:
        numeric = {
            k: v for k, v in (self.verified or {}).items() if isinstance(v, int | float) and not isinstance(v, bool)
        }
        return {"turns": self.turns, **numeric}


def register() -> None:
    """Register ``ngym`` with skyrl_gym (idempotent)."""
    if ENV_ID not in skyrl_gym.registry:
        skyrl_gym.register(id=ENV_ID, entry_point="ngym.train.skyrl:NgymEnv")


register()
