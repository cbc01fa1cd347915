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
    "BaseServer": "ngym.server.base",
    "SimpleServer": "ngym.server.base",
    "BaseServerConfig": "ngym.server.base",
    "BaseResourcesServer": "ngym.server.resources",
    "SimpleResourcesServer": "ngym.server.resources",
    "BaseResourcesServerConfig": "ngym.server.resources",
    "BaseRunRequest": "ngym.server.protocol.bodies",
    "BaseVerifyRequest": "ngym.server.protocol.bodies",
    "BaseVerifyResponse": "ngym.server.protocol.bodies",
    "BaseSeedSessionRequest": "ngym.server.protocol.bodies",
    "BaseSeedSessionResponse": "ngym.server.protocol.bodies",
    "ResourcesSeedSessionRequest": "ngym.server.protocol.bodies",
    "ResourcesSeedSessionResponse": "ngym.server.protocol.bodies",
    "ResourcesCloseSessionRequest": "ngym.server.protocol.bodies",
    "ResourcesCloseSessionResponse": "ngym.server.protocol.bodies",
    "SESSION_ID_KEY": "ngym.server.sessions.manager",
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
