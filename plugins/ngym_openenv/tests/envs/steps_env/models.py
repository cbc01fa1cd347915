"""The steps environment's Action and Observation (imported relatively by its server, as OpenEnv's envs do)."""

from enum import Enum

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class Move(str, Enum):
    FORWARD = "FORWARD"
    BACK = "BACK"


class StepsAction(Action):
    move: Move = Field(..., description="Which way to move.")


class StepsObservation(Observation):
    position: int = 0
