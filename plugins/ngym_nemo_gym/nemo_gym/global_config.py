"""NeMo Gym's global config: the merged YAML configs of the run, and the reserved row keys.

Under ngym the global config is what ``ngym run`` was given (see :mod:`ngym_nemo_gym.servers`); it is an
OmegaConf ``DictConfig``, as environments index it with attributes and ``.get``.
"""

from __future__ import annotations

from typing import Any

from ngym_nemo_gym.servers import global_config
from omegaconf import DictConfig, OmegaConf

TASK_INDEX_KEY_NAME = "_ng_task_index"
ROLLOUT_INDEX_KEY_NAME = "_ng_rollout_index"
ATTEMPT_INDEX_KEY_NAME = "_ng_attempt_index"
ROLLOUT_ID_KEY_NAME = "_ng_rollout_id"
RESPONSES_CREATE_PARAMS_KEY_NAME = "responses_create_params"
RESPONSE_KEY_NAME = "response"
AGENT_REF_KEY_NAME = "agent_ref"
HEAD_SERVER_KEY_NAME = "head_server"
CACHE_DIR_KEY_NAME = "cache_dir"
RESULTS_DIR_KEY_NAME = "results_dir"
NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME = "NEMO_GYM_CONFIG_DICT"
NEMO_GYM_CONFIG_PATH_ENV_VAR_NAME = "NEMO_GYM_CONFIG_PATH"
MODEL_SERVER_TYPE_KEY_NAME = "responses_api_models"
RESOURCES_SERVER_TYPE_KEY_NAME = "resources_servers"
AGENT_SERVER_TYPE_KEY_NAME = "responses_api_agents"


def get_global_config_dict(*args: Any, **kwargs: Any) -> DictConfig:
    """The run's merged configs (``{}`` outside ``ngym run``)."""
    return OmegaConf.create(global_config())


def maybe_get_global_config_dict() -> DictConfig | None:
    config = global_config()
    return OmegaConf.create(config) if config else None


def get_first_server_config_dict(global_config_dict: Any, top_level_path: str) -> Any:
    """The fields of instance ``top_level_path``: configs nest ``name → type → implementation → fields``."""
    node = global_config_dict[top_level_path]
    node = next(iter(node.values()))
    return next(iter(node.values()))
