"""Wire models: the OpenAI Responses types and the bodies of every resources-server route.

Each public name is written once, as ``name as name`` (a re-export for ``mypy --strict`` and editors); ``__all__``
is derived from those imports.
"""

from types import ModuleType as _ModuleType

from ngym.server.protocol.bodies import FAILURE_CLASS_KEY as FAILURE_CLASS_KEY
from ngym.server.protocol.bodies import FAILURE_JUDGE_ERROR_KEY as FAILURE_JUDGE_ERROR_KEY
from ngym.server.protocol.bodies import ROLLOUT_INDEX_KEY as ROLLOUT_INDEX_KEY
from ngym.server.protocol.bodies import TASK_INDEX_KEY as TASK_INDEX_KEY
from ngym.server.protocol.bodies import AggregateMetrics as AggregateMetrics
from ngym.server.protocol.bodies import AggregateMetricsRequest as AggregateMetricsRequest
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
from ngym.server.protocol.responses import FunctionCall as FunctionCall
from ngym.server.protocol.responses import FunctionCallOutput as FunctionCallOutput
from ngym.server.protocol.responses import InputMessage as InputMessage
from ngym.server.protocol.responses import OtherItem as OtherItem
from ngym.server.protocol.responses import OutputMessage as OutputMessage
from ngym.server.protocol.responses import OutputText as OutputText
from ngym.server.protocol.responses import ReasoningItem as ReasoningItem
from ngym.server.protocol.responses import Refusal as Refusal
from ngym.server.protocol.responses import Response as Response
from ngym.server.protocol.responses import ResponseCreateParams as ResponseCreateParams

#: Every name imported above (the submodules aside, which importing them binds here too).
__all__ = sorted(
    name for name, value in globals().items() if not name.startswith("_") and not isinstance(value, _ModuleType)
)
