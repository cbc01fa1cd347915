"""ngym: build the environments LLM agents are trained in with RL (resources servers), NeMo Gym-compatible.

What plugin authors import::

    from ngym import (SimpleResourcesServer, BaseResourcesServerConfig, BaseSeedSessionRequest,
                      BaseSeedSessionResponse, BaseVerifyRequest, BaseVerifyResponse, Domain, hookimpl)

Names are loaded on first use, so ``import ngym`` (and the CLI) stay fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Domain": "ngym.domain",
    "hookimpl": "ngym.plugins",
    "NgymError": "ngym.errors",
    "ConfigError": "ngym.errors",
    "PluginError": "ngym.errors",
    "JudgeError": "ngym.errors",
    "BaseServer": "ngym.server",
    "SimpleServer": "ngym.server",
    "BaseServerConfig": "ngym.server",
    "BaseResourcesServer": "ngym.resources",
    "SimpleResourcesServer": "ngym.resources",
    "BaseResourcesServerConfig": "ngym.resources",
    "BaseRunRequest": "ngym.protocol.bodies",
    "BaseVerifyRequest": "ngym.protocol.bodies",
    "BaseVerifyResponse": "ngym.protocol.bodies",
    "BaseMultiRewardVerifyResponse": "ngym.protocol.bodies",
    "EpisodeId": "ngym.protocol.bodies",
    "TaskId": "ngym.protocol.bodies",
    "MCPServerMetadata": "ngym.protocol.bodies",
    "ReverifyMode": "ngym.resources",
    "BaseSeedSessionRequest": "ngym.protocol.bodies",
    "BaseSeedSessionResponse": "ngym.protocol.bodies",
    "ResourcesSeedSessionRequest": "ngym.protocol.bodies",
    "ResourcesSeedSessionResponse": "ngym.protocol.bodies",
    "ResourcesCloseSessionRequest": "ngym.protocol.bodies",
    "ResourcesCloseSessionResponse": "ngym.protocol.bodies",
    "SESSION_ID_KEY": "ngym.sessions.manager",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ngym' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
