"""NeMo Gym's global config: the merged YAML configs of the run, and the reserved row keys.

Under ngym the global config is what ``ngym run`` was given (see :mod:`ngym_nemo_gym.servers`); it is an
OmegaConf ``DictConfig``, as environments index it with attributes and ``.get``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ngym_nemo_gym.servers import global_config
from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, ConfigDict

from nemo_gym import _resolve_under_cwd_or_install
from ngym.plugin_api import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

TASK_INDEX_KEY_NAME = TASK_INDEX_KEY
ROLLOUT_INDEX_KEY_NAME = ROLLOUT_INDEX_KEY
ATTEMPT_INDEX_KEY_NAME = "_ng_attempt_index"
ROLLOUT_ID_KEY_NAME = "_ng_rollout_id"
RESPONSES_CREATE_PARAMS_KEY_NAME = "responses_create_params"
RESPONSE_KEY_NAME = "response"
AGENT_REF_KEY_NAME = "agent_ref"
ENVIRONMENT_SERVER_STAMP_KEY_NAME = "_ng_environment_server"
TASK_SOURCE_KEY_NAME = "task_source"
SKILLS_REF_KEY_NAME = "skills_ref"
HEAD_SERVER_KEY_NAME = "head_server"
CACHE_DIR_KEY_NAME = "cache_dir"
OBSERVABILITY_ENABLED_KEY_NAME = "observability_enabled"
TOKEN_ID_CAPTURE_BLOCK = "token_id_capture"
HF_TOKEN_KEY_NAME = "hf_token"  # noqa: S105 - a key name, not a secret
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


def rollout_run_key(row: Any) -> str | None:
    """What ran a rollout, for grouping: the environment server stamped on it, else its agent's name."""
    server = row.get(ENVIRONMENT_SERVER_STAMP_KEY_NAME)
    if server is not None:
        return str(server)
    return (row.get(AGENT_REF_KEY_NAME) or {}).get("name")


def get_hf_token() -> str | None:
    """The Hugging Face token the run's config gives (``hf_token``), else ``None``."""
    token = global_config().get(HF_TOKEN_KEY_NAME)
    return str(token) if token else None


def get_first_server_config_dict(global_config_dict: Any, top_level_path: str) -> Any:
    """The fields of instance ``top_level_path``: configs nest ``name → type → implementation → fields``."""
    node = global_config_dict[top_level_path]
    node = next(iter(node.values()))
    return next(iter(node.values()))


POLICY_BASE_URL_KEY_NAME = "policy_base_url"
POLICY_API_KEY_KEY_NAME = "policy_api_key"  # noqa: S105 - a key name, not a secret
POLICY_MODEL_NAME_KEY_NAME = "policy_model_name"
POLICY_MODEL_KEY_NAME = "policy_model"
CONFIG_PATHS_KEY_NAME = "config_paths"
INHERIT_FROM_KEY_NAME = "_inherit_from"
COPY_KEY_NAME = "_copy"


class GlobalConfigDictParserConfig(BaseModel):
    """What :class:`GlobalConfigDictParser` starts from. ngym reads no command line or ``.env`` here."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    dotenv_path: Path | None = None
    initial_global_config_dict: DictConfig | None = None
    skip_load_from_cli: bool = False
    skip_load_from_dotenv: bool = False
    hide_secrets: bool = False
    offline: bool = False

    #: For config resolution that needs no model (data loading, fixtures): a placeholder policy model.
    NO_MODEL_GLOBAL_CONFIG_DICT: ClassVar[DictConfig] = DictConfig(
        {
            POLICY_BASE_URL_KEY_NAME: "",
            POLICY_API_KEY_KEY_NAME: "",
            POLICY_MODEL_NAME_KEY_NAME: "",
            POLICY_MODEL_KEY_NAME: {"responses_api_models": {"dummy_model": {"entrypoint": "app.py"}}},
        }
    )


class GlobalConfigDictParser:
    """Composes NeMo Gym configs: ``config_paths`` (files merged in order, recursively, before the initial dict),
    then ``_inherit_from: <dotted path>`` (that node merged under this one, and removed) and ``_copy`` (kept)."""

    def parse(self, config: GlobalConfigDictParserConfig | None = None) -> DictConfig:
        config = config or GlobalConfigDictParserConfig()
        initial = config.initial_global_config_dict or OmegaConf.create({})
        merged = OmegaConf.create({})
        for path in self._expand(list(initial.get(CONFIG_PATHS_KEY_NAME) or []), seen=set()):
            loaded = _load_mapping(path)
            loaded.pop(CONFIG_PATHS_KEY_NAME, None)
            merged = _merged(merged, loaded)
        merged = _merged(merged, initial)
        frozen = merged.copy()
        self._swap(merged, merged, frozen)
        return merged

    def _expand(self, paths: list[str], seen: set[Path]) -> list[Path]:
        """Config files in merge order: a file's own ``config_paths`` come before it."""
        ordered: list[Path] = []
        for raw in paths:
            path = _resolve_under_cwd_or_install(str(raw))
            if path in seen:
                continue
            seen.add(path)
            nested = _load_mapping(path).get(CONFIG_PATHS_KEY_NAME) or []
            ordered += self._expand(list(nested), seen)
            ordered.append(path)
        return ordered

    def _swap(self, node: Any, root: DictConfig, frozen: DictConfig) -> None:
        if not isinstance(node, DictConfig):
            return
        for key in list(node.keys()):
            if OmegaConf.is_missing(node, key):
                continue
            value = node[key]
            if isinstance(value, DictConfig):
                source_key = INHERIT_FROM_KEY_NAME if INHERIT_FROM_KEY_NAME in value else None
                source_key = source_key or (COPY_KEY_NAME if COPY_KEY_NAME in value else None)
                self._swap(value, root, frozen)
                if source_key is not None:
                    dotted = str(value.pop(source_key))
                    source = OmegaConf.select(frozen, dotted)
                    if source_key == INHERIT_FROM_KEY_NAME:
                        parent_path, _, last = dotted.rpartition(".")
                        parent = OmegaConf.select(root, parent_path) if parent_path else root
                        if isinstance(parent, DictConfig) and last in parent and last != key:
                            parent.pop(last)
                    node[key] = OmegaConf.merge(source, value) if source is not None else value


def _load_mapping(path: Path) -> DictConfig:
    """A config file's mapping (a file holding a list or a scalar is refused, naming the file)."""
    loaded = OmegaConf.load(path)
    if not isinstance(loaded, DictConfig):
        raise ValueError(f"{path}: a NeMo Gym config file holds a mapping, not a {type(loaded).__name__}")
    return loaded


def _merged(base: DictConfig, other: DictConfig) -> DictConfig:
    """``other`` merged over ``base`` (two mappings merge into a mapping)."""
    merged = OmegaConf.merge(base, other)
    assert isinstance(merged, DictConfig)
    return merged


def label_runs(agent_by_key: Mapping[str, str | None]) -> dict[str, str]:
    """A unique label per run key (an environment server): its agent's name when no other key runs that agent,
    else the key itself; a label that would still repeat (a server named like another run's agent) is the key."""
    keys_of_agent = Counter(agent for agent in agent_by_key.values() if agent is not None)
    labels = {
        key: agent if agent is not None and keys_of_agent[agent] == 1 else key for key, agent in agent_by_key.items()
    }
    while True:
        used = Counter(labels.values())
        clashing = [key for key, label in labels.items() if used[label] > 1 and label != key]
        if not clashing:
            return labels
        labels.update({key: key for key in clashing})
