"""The tally environment's OpenEnv app (as `openenv init` lays one out); ``$TALLY_MAX_ENVS`` sets its
``max_concurrent_envs`` (2 unless set), so tests can make it a one-slot environment."""

import os

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

try:
    from .tally_environment import TallyEnvironment
except ImportError:
    from server.tally_environment import TallyEnvironment

app = create_app(
    TallyEnvironment,
    CallToolAction,
    CallToolObservation,
    env_name="tally_env",
    max_concurrent_envs=int(os.environ.get("TALLY_MAX_ENVS", "2")),
)
