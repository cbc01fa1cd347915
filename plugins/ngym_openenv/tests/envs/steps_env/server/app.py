"""The steps environment's OpenEnv app, importing relatively only (as OpenEnv's grid_world_env does)."""

from openenv.core.env_server.http_server import create_app

from ..models import StepsAction, StepsObservation
from .steps_environment import StepsEnvironment

app = create_app(StepsEnvironment, StepsAction, StepsObservation, env_name="steps_env")
