"""How another process reaches a sandbox its owner manages."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue


class DirectSandboxConnection(BaseModel):
    """Reconnect through a named top-level sandbox-provider configuration."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["direct"] = "direct"
    provider_config_ref: str
    descriptor: dict[str, JsonValue]


class SandboxAccess(BaseModel):
    model_config = ConfigDict(extra="forbid")

    connection: DirectSandboxConnection
    workdir: str
