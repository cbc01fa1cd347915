"""A test OpenEnv MCP environment: one tool, ``add(n)``, adds to a tally.

Each call's observation carries ``reward = tally / 10`` and ``done`` once the tally reaches 10; the state
declares ``total_reward`` (the sum of the rewards so far). ``close()`` appends the episode id to the file named
by ``$TALLY_CLOSE_LOG``, so a test can count closes and see the episode id it passed to ``reset``.
"""

import os
from typing import Any
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Observation, State


class TallyState(State):
    tally: int = 0
    total_reward: float = 0.0


class TallyEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("tally")

        @mcp.tool
        def add(n: int) -> int:
            """Add n to the tally; returns the new tally."""
            self._state.tally += n
            return self._state.tally

        super().__init__(mcp)
        self._state = TallyState(episode_id=str(uuid4()))

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        self._state = TallyState(episode_id=episode_id or str(uuid4()))
        return Observation(done=False, reward=0.0)

    def _score(self, observation: Observation) -> Observation:
        if getattr(observation, "tool_name", None) == "add" and not getattr(observation, "error", None):
            observation.reward = self._state.tally / 10
            observation.done = self._state.tally >= 10
            self._state.total_reward += observation.reward
        return observation

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._score(super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._score(await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(done=False, reward=None, metadata={"error": f"unknown action {action!r}"})

    @property
    def state(self) -> TallyState:
        return self._state

    def close(self) -> None:
        log = os.environ.get("TALLY_CLOSE_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{self._state.episode_id}\n")
        super().close()
