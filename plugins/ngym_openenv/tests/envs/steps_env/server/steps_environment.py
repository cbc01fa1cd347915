"""A test OpenEnv environment laid out like OpenEnv's own ``envs/``: a line of 3; FORWARD pays 0.5, reaching 3
pays 1.0 and ends the episode; BACK pays -0.1 (rewards outside [0, 1] summed by the ``sum`` rule)."""

from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

from ..models import Move, StepsAction, StepsObservation


class StepsEnvironment(Environment):
    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self.position = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> StepsObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self.position = 0
        return StepsObservation(position=0, reward=0.0, done=False)

    def step(self, action: StepsAction, timeout_s: float | None = None, **kwargs: Any) -> StepsObservation:
        self._state.step_count += 1
        self.position += 1 if action.move == Move.FORWARD else -1
        done = self.position >= 3
        reward = 1.0 if done else (0.5 if action.move == Move.FORWARD else -0.1)
        return StepsObservation(position=self.position, reward=reward, done=done)

    @property
    def state(self) -> State:
        return self._state
