"""ngym: build the environments LLM agents are trained in with RL (resources servers), NeMo Gym-compatible.

What plugin authors import::

    from ngym import (SimpleResourcesServer, BaseResourcesServerConfig, BaseSeedSessionRequest,
                      BaseSeedSessionResponse, BaseVerifyRequest, BaseVerifyResponse, Domain, hookimpl)

Names are loaded on first use, so ``import ngym`` (and the CLI) stay fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and editors see; at run time the names load on first use (below)
    from ngym.domain import Domain
    from ngym.errors import ConfigError, JudgeError, NgymError, PluginError
    from ngym.plugins import hookimpl
    from ngym.server.base import BaseServer, BaseServerConfig, SimpleServer
    from ngym.server.protocol.bodies import (
        BaseMultiRewardVerifyResponse,
        BaseRunRequest,
        BaseSeedSessionRequest,
        BaseSeedSessionResponse,
        BaseVerifyRequest,
        BaseVerifyResponse,
        EpisodeId,
        MCPServerMetadata,
        ResourcesCloseSessionRequest,
        ResourcesCloseSessionResponse,
        ResourcesSeedSessionRequest,
        ResourcesSeedSessionResponse,
        TaskId,
    )
    from ngym.server.resources import (
        BaseResourcesServer,
        BaseResourcesServerConfig,
        ReverifyMode,
        SimpleResourcesServer,
    )
    from ngym.server.sessions.manager import SESSION_ID_KEY

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "Domain": "ngym.domain",
    "hookimpl": "ngym.plugins",
    "NgymError": "ngym.errors",
    "ConfigError": "ngym.errors",
    "PluginError": "ngym.errors",
    "JudgeError": "ngym.errors",
    "BaseServer": "ngym.server.base",
    "SimpleServer": "ngym.server.base",
    "BaseServerConfig": "ngym.server.base",
    "BaseResourcesServer": "ngym.server.resources",
    "SimpleResourcesServer": "ngym.server.resources",
    "BaseResourcesServerConfig": "ngym.server.resources",
    "BaseRunRequest": "ngym.server.protocol.bodies",
    "BaseVerifyRequest": "ngym.server.protocol.bodies",
    "BaseVerifyResponse": "ngym.server.protocol.bodies",
    "BaseMultiRewardVerifyResponse": "ngym.server.protocol.bodies",
    "EpisodeId": "ngym.server.protocol.bodies",
    "TaskId": "ngym.server.protocol.bodies",
    "MCPServerMetadata": "ngym.server.protocol.bodies",
    "ReverifyMode": "ngym.server.resources",
    "BaseSeedSessionRequest": "ngym.server.protocol.bodies",
    "BaseSeedSessionResponse": "ngym.server.protocol.bodies",
    "ResourcesSeedSessionRequest": "ngym.server.protocol.bodies",
    "ResourcesSeedSessionResponse": "ngym.server.protocol.bodies",
    "ResourcesCloseSessionRequest": "ngym.server.protocol.bodies",
    "ResourcesCloseSessionResponse": "ngym.server.protocol.bodies",
    "SESSION_ID_KEY": "ngym.server.sessions.manager",
}

__all__ = [  # the order of _EXPORTS
    "Domain",
    "hookimpl",
    "NgymError",
    "ConfigError",
    "PluginError",
    "JudgeError",
    "BaseServer",
    "SimpleServer",
    "BaseServerConfig",
    "BaseResourcesServer",
    "SimpleResourcesServer",
    "BaseResourcesServerConfig",
    "BaseRunRequest",
    "BaseVerifyRequest",
    "BaseVerifyResponse",
    "BaseMultiRewardVerifyResponse",
    "EpisodeId",
    "TaskId",
    "MCPServerMetadata",
    "ReverifyMode",
    "BaseSeedSessionRequest",
    "BaseSeedSessionResponse",
    "ResourcesSeedSessionRequest",
    "ResourcesSeedSessionResponse",
    "ResourcesCloseSessionRequest",
    "ResourcesCloseSessionResponse",
    "SESSION_ID_KEY",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ngym' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
