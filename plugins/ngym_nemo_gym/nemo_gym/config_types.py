"""NeMo Gym's config types: references to other servers, config bases, datasets, aggregate-metrics bodies."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

import ngym
from ngym import Domain
from ngym.plugin_api import AggregateMetrics, AggregateMetricsRequest

#: The path prefix that carries a rollout's id to the servers it calls (``/ng-rollout/<id>/...``), and the segment
#: after it that marks a call whose token ids are captured for training.
ROLLOUT_PATH_PREFIX = "ng-rollout"
TOKEN_CAPTURE_PATH_SEGMENT = "training-token-capture"

__all__ = [
    "ROLLOUT_PATH_PREFIX",
    "TOKEN_CAPTURE_PATH_SEGMENT",
    "AgentServerRef",
    "AggregateMetrics",
    "AggregateMetricsRequest",
    "BaseRunServerInstanceConfig",
    "BaseServerConfig",
    "DatasetConfig",
    "Domain",
    "ModelServerRef",
    "ResourcesServerRef",
]


class ModelServerRef(BaseModel):
    """A model server by instance name (a judge, a user simulator): ``ServerClient`` resolves the name."""

    type: Literal["responses_api_models"]
    name: str


class ResourcesServerRef(BaseModel):
    type: Literal["resources_servers"]
    name: str


class AgentServerRef(BaseModel):
    type: Literal["responses_api_agents"]
    name: str


class BaseServerConfig(BaseModel):
    host: str
    port: int


BaseRunServerInstanceConfig = ngym.BaseServerConfig


class DatasetConfig(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    type: Literal["train", "validation", "example"]
    jsonl_fpath: str
    num_repeats: int = Field(default=1, ge=1)
    license: str | None = None
    metadata: dict[str, Any] | None = None
