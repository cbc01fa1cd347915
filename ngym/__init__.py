"""ngym: build the environments LLM agents are trained in with RL (resources servers), NeMo Gym-compatible.

What plugin authors import::

    from ngym import (SimpleResourcesServer, BaseResourcesServerConfig, BaseSeedSessionRequest,
                      BaseSeedSessionResponse, BaseVerifyRequest, BaseVerifyResponse, Domain, hookimpl)

Names are loaded on first use, so ``import ngym`` (and the CLI) stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ngym._exports import lazy_exports

# The public names, each written once (``ngym._exports``): what type checkers and editors see, and at run time the
# table a name loads from on first use.
if TYPE_CHECKING:
    from ngym.domain import Domain as Domain
    from ngym.errors import ConfigError as ConfigError
    from ngym.errors import JudgeError as JudgeError
    from ngym.errors import NgymError as NgymError
    from ngym.errors import PluginError as PluginError
    from ngym.plugins import hookimpl as hookimpl
    from ngym.server.pipeline.base import BaseServer as BaseServer
    from ngym.server.pipeline.base import BaseServerConfig as BaseServerConfig
    from ngym.server.pipeline.base import SimpleServer as SimpleServer
    from ngym.server.pipeline.resources import BaseResourcesServer as BaseResourcesServer
    from ngym.server.pipeline.resources import BaseResourcesServerConfig as BaseResourcesServerConfig
    from ngym.server.pipeline.resources import SimpleResourcesServer as SimpleResourcesServer
    from ngym.server.protocol.bodies import BaseMultiRewardVerifyResponse as BaseMultiRewardVerifyResponse
    from ngym.server.protocol.bodies import BaseRunRequest as BaseRunRequest
    from ngym.server.protocol.bodies import BaseSeedSessionRequest as BaseSeedSessionRequest
    from ngym.server.protocol.bodies import BaseSeedSessionResponse as BaseSeedSessionResponse
    from ngym.server.protocol.bodies import BaseVerifyRequest as BaseVerifyRequest
    from ngym.server.protocol.bodies import BaseVerifyResponse as BaseVerifyResponse
    from ngym.server.protocol.bodies import EpisodeId as EpisodeId
    from ngym.server.protocol.bodies import MCPServerMetadata as MCPServerMetadata
    from ngym.server.protocol.bodies import ResourcesCloseSessionRequest as ResourcesCloseSessionRequest
    from ngym.server.protocol.bodies import ResourcesCloseSessionResponse as ResourcesCloseSessionResponse
    from ngym.server.protocol.bodies import ResourcesSeedSessionRequest as ResourcesSeedSessionRequest
    from ngym.server.protocol.bodies import ResourcesSeedSessionResponse as ResourcesSeedSessionResponse
    from ngym.server.protocol.bodies import TaskId as TaskId
    from ngym.server.protocol.reverify import ReverifyMode as ReverifyMode
    from ngym.server.sessions.manager import SESSION_ID_KEY as SESSION_ID_KEY

__version__ = "0.1.0"

if not TYPE_CHECKING:  # checkers see the imports above (``as``: re-exported); this is their run-time side
    __getattr__, __dir__, __all__ = lazy_exports(__name__, __file__, "__version__")
