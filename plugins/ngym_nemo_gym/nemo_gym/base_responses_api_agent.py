"""NeMo Gym's agent servers (``nemo_gym.base_responses_api_agent``), on ngym.

An agent server runs one rollout: ``POST /run`` takes a dataset row, drives the policy model through
``/v1/responses`` and the resources server's tools, and returns the verify response. NeMo Gym's own agents
(``responses_api_agents/<name>``, shipped in its wheel) and environments that bundle one subclass
``SimpleResponsesAPIAgent`` and write ``responses`` and ``run``; this base gives them the routes, metrics
aggregation, rollout-id correlation of downstream calls, and NeMo 0.7's idempotent agent sessions
(``/v1/agent_sessions``, ``/v1/agent_sessions/close``).

What differs from NeMo Gym: the agent-session id travels in the request bodies only. NeMo also pins it in a
Starlette session cookie (``agent_session_id``) and refuses a body naming another id; ngym's agent servers set no
cookie, so that cross-check is not made (a request that does carry a session with that key is still checked).
OpenTelemetry spans (NeMo's ``telemetry`` package) are not emitted.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import wraps
from time import monotonic
from typing import Any
from warnings import warn

from fastapi import Body, FastAPI, HTTPException, Request
from ngym_nemo_gym.servers import resolve_server
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from nemo_gym.base_resources_server import BaseRunRequest, BaseVerifyResponse
from nemo_gym.config_types import (
    ROLLOUT_PATH_PREFIX,
    TOKEN_CAPTURE_PATH_SEGMENT,
    AggregateMetrics,
    AggregateMetricsRequest,
    BaseRunServerInstanceConfig,
)
from nemo_gym.episode_types import EpisodeId, TaskId
from nemo_gym.global_config import OBSERVABILITY_ENABLED_KEY_NAME, TOKEN_ID_CAPTURE_BLOCK
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.reward_profile import AggregateMetricsMixin, compute_aggregate_metrics
from nemo_gym.rollout_correlation import maybe_rollout_id_from_run_body, rollout_context
from nemo_gym.rollout_observability import AgentObservationBundle
from nemo_gym.sandbox.access import SandboxAccess
from nemo_gym.server_utils import BaseServer, SimpleServer, apply_rollout_prefix, rollout_path_prefix
from nemo_gym.tool_access import ToolAccess

__all__ = [
    "AGENT_SESSION_COOKIE_KEY",
    "AgentCloseSessionRequest",
    "AgentCloseSessionResponse",
    "AgentSeedSessionRequest",
    "AgentSeedSessionResponse",
    "AgentSessionSetupError",
    "AgentSessionState",
    "BaseResponsesAPIAgent",
    "BaseResponsesAPIAgentConfig",
    "Body",
    "SimpleResponsesAPIAgent",
]

#: The session key NeMo Gym binds an agent session to (read here when a request carries a session).
AGENT_SESSION_COOKIE_KEY = "agent_session_id"


def _unique_names(accesses: list[Any], message: str) -> list[Any]:
    names = [access.name for access in accesses]
    if len(names) != len(set(names)):
        raise ValueError(message)
    return accesses


class AgentSeedSessionRequest(BaseModel):
    """Start agent state under an id the caller chose; the same request again returns the same session."""

    model_config = ConfigDict(extra="forbid")

    agent_session_id: str = Field(min_length=1)
    episode_id: EpisodeId
    task_id: TaskId
    tool_accesses: list[ToolAccess] = Field(default_factory=list)
    sandbox_access: SandboxAccess | None = None

    @field_validator("tool_accesses")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        return _unique_names(value, "tool access names must be unique within an agent session")


class AgentSeedSessionResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_session_id: str


class AgentCloseSessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent_session_id: str
    episode_id: EpisodeId


class AgentCloseSessionResponse(BaseModel):
    """The session is closed; what the harness observed during it comes back here."""

    model_config = ConfigDict(extra="forbid")

    agent_session_id: str
    agent_observations: AgentObservationBundle | None = None
    resources_cookies: dict[str, str] | None = None


class BaseResponsesAPIAgentConfig(BaseRunServerInstanceConfig):
    session_close_retry_window_seconds: float = Field(default=300, gt=0, allow_inf_nan=False)
    skip_verification: bool = False
    skip_verification_reward: float = 0.0
    token_id_capture: bool = False
    tool_accesses: list[ToolAccess] = Field(default_factory=list)

    @field_validator("tool_accesses")
    @classmethod
    def _unique(cls, value: list[Any]) -> list[Any]:
        return _unique_names(value, "configured tool access names must be unique")


class BaseResponsesAPIAgent(BaseServer):
    config: BaseResponsesAPIAgentConfig


@dataclass
class AgentSessionState:
    """What a harness keeps for one agent session; ``request`` is the seed it was bound to (never changes)."""

    request: AgentSeedSessionRequest


class AgentSessionSetupError(Exception):
    """Seeding failed half-way: ``state`` is kept so that close can release it; ``error`` is re-raised."""

    def __init__(self, state: AgentSessionState, *, error: BaseException) -> None:
        super().__init__(str(error))
        self.state = state
        self.error = error


@dataclass
class _SessionRecord:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    state: AgentSessionState | None = None
    closing: bool = False
    episode_id: EpisodeId | None = None
    close_response: AgentCloseSessionResponse | None = None
    expires_at: float = float("inf")


class SimpleResponsesAPIAgent(BaseResponsesAPIAgent, AggregateMetricsMixin, SimpleServer):
    """An agent server: subclasses write ``responses`` and ``run`` (and, for episode sessions,
    ``_seed_agent_session_state`` / ``_close_agent_session_state``)."""

    config: BaseResponsesAPIAgentConfig
    _session_records: dict[str, _SessionRecord] = PrivateAttr(default_factory=dict)
    # Closed sessions, oldest first: their close answer is kept for the retry window, then forgotten.
    _closed_records: OrderedDict[str, _SessionRecord] = PrivateAttr(default_factory=OrderedDict)

    # ---- routes --------------------------------------------------------------------------------------

    def setup_webserver(self) -> FastAPI:
        app = FastAPI(title=self.config.name or type(self).__name__)
        responses = self.responses
        app.post("/v1/responses")(responses)
        # A call made with url_path_for_run arrives under the rollout prefix: the same handler serves it.
        app.post(f"/{ROLLOUT_PATH_PREFIX}/{{rollout_id}}/v1/responses")(responses)
        app.post(f"/{ROLLOUT_PATH_PREFIX}/{{rollout_id}}/{TOKEN_CAPTURE_PATH_SEGMENT}/v1/responses")(responses)

        run = self.run

        @wraps(run)
        async def run_in_rollout_context(*args: Any, **kwargs: Any) -> BaseVerifyResponse:
            body = kwargs.get("body")
            if body is None:
                body = next((arg for arg in args if isinstance(arg, BaseRunRequest)), None)
            with rollout_context(self.rollout_id_from_run(body)):
                return await run(*args, **kwargs)

        app.post("/run")(run_in_rollout_context)
        app.post("/aggregate_metrics")(self.aggregate_metrics)
        app.post("/v1/agent_sessions")(self.seed_agent_session)
        app.post("/v1/agent_sessions/close")(self.close_agent_session)
        self.setup_liveness(app)
        return app

    @abstractmethod
    async def responses(self, body: NeMoGymResponseCreateParamsNonStreaming = Body()) -> NeMoGymResponse:
        """One policy-model turn, as the OpenAI Responses API."""

    @abstractmethod
    async def run(self, body: BaseRunRequest = Body()) -> BaseVerifyResponse:
        """One rollout of a dataset row, verified."""

    async def aggregate_metrics(self, body: AggregateMetricsRequest = Body()) -> AggregateMetrics:
        """The resources server's aggregation over the verify responses (override to proxy it)."""
        if self.config.skip_verification:
            warn(
                "Skipping aggregate metrics because skip_verification=True",
                RuntimeWarning,
                stacklevel=2,
            )
            return AggregateMetrics()
        metrics: AggregateMetrics = compute_aggregate_metrics(
            body.verify_responses,
            compute_metrics_fn=self.compute_metrics,
            get_key_metrics_fn=self.get_key_metrics,
            compute_repeat_metrics_fn=self.compute_repeat_metrics,
        )
        return metrics

    # ---- agent sessions ------------------------------------------------------------------------------

    @asynccontextmanager
    async def _locked_session(self, session_id: str) -> AsyncIterator[_SessionRecord]:
        now = monotonic()
        while self._closed_records:
            key, record = next(iter(self._closed_records.items()))
            if record.expires_at > now:
                break
            self._closed_records.pop(key)
            self._session_records.pop(key, None)
        while True:
            record = self._session_records.setdefault(session_id, _SessionRecord())
            async with record.lock:
                # A waiter may wake after the record it waited on was dropped: never act on a replaced record.
                if self._session_records.get(session_id) is not record:
                    continue
                try:
                    yield record
                finally:
                    if record.state is None and record.close_response is None:
                        self._session_records.pop(session_id, None)
                return

    @staticmethod
    def _agent_session_id_from_request(request: Request | None) -> str | None:
        if request is None or "session" not in request.scope:
            return None
        session = request.scope["session"]
        if not isinstance(session, Mapping) or AGENT_SESSION_COOKIE_KEY not in session:
            return None
        marker = session[AGENT_SESSION_COOKIE_KEY]
        if not isinstance(marker, str) or not marker:
            raise HTTPException(409, "Invalid agent session marker")
        return marker

    def _require_agent_session(self, agent_session_id: str) -> AgentSessionState:
        record = self._session_records.get(agent_session_id)
        if record is None or record.state is None or record.closing:
            raise HTTPException(409, "Unknown or closing agent_session_id")
        return record.state

    def effective_tool_accesses(self, request: AgentSeedSessionRequest) -> list[Any]:
        """The configured tool grants, overridden by name by the session's own."""
        accesses = {access.name: access for access in self.config.tool_accesses}
        accesses.update((access.name, access) for access in request.tool_accesses)
        return list(accesses.values())

    async def seed_agent_session(self, request: Request, body: AgentSeedSessionRequest) -> AgentSeedSessionResponse:
        """Seed once per id; the identical request again reuses the state, a different one is a 409."""
        if self.config.num_workers not in (None, 1):
            raise ValueError("Agent sessions require num_workers=1")
        current = self._agent_session_id_from_request(request)
        if current is not None and current != body.agent_session_id:
            raise HTTPException(409, "agent_session_id does not match the session cookie")
        async with self._locked_session(body.agent_session_id) as record:
            if record.close_response is not None:
                raise HTTPException(409, "Agent session is already closed")
            if record.closing:
                raise HTTPException(409, "Agent session is closing")
            if record.state is None:
                record.episode_id = body.episode_id
                try:
                    record.state = await self._seed_agent_session_state(body.model_copy(deep=True))
                except AgentSessionSetupError as error:
                    record.state = error.state  # kept for close to release; never activated
                    record.closing = True
                    raise error.error from None
            elif record.state.request != body:
                raise HTTPException(409, "agent_session_id is already bound to another seed request")
            return AgentSeedSessionResponse(agent_session_id=body.agent_session_id)

    async def close_agent_session(self, request: Request, body: AgentCloseSessionRequest) -> AgentCloseSessionResponse:
        """Close once; a retry within ``session_close_retry_window_seconds`` gets the same answer. Closing an
        id never seeded records the close, so a late seed of it is refused within that window."""
        if type(self)._close_agent_session_state is SimpleResponsesAPIAgent._close_agent_session_state:
            raise NotImplementedError("This agent does not implement episode sessions")
        current = self._agent_session_id_from_request(request)
        if current is not None and current != body.agent_session_id:
            raise HTTPException(409, "agent_session_id does not match the session cookie")
        async with self._locked_session(body.agent_session_id) as record:
            if record.episode_id is not None and record.episode_id != body.episode_id:
                raise HTTPException(409, "episode_id does not match the seeded agent session")
            if record.close_response is not None:
                return record.close_response.model_copy(deep=True)
            if record.state is None:
                result = AgentCloseSessionResponse(agent_session_id=body.agent_session_id)
            else:
                record.closing = True
                # A failing release raises here and keeps the state, so the caller can close again.
                result = await self._close_agent_session_state(record.state)
            record.state = None
            record.episode_id = body.episode_id
            record.close_response = result.model_copy(deep=True)
            record.expires_at = monotonic() + self.config.session_close_retry_window_seconds
            self._closed_records[body.agent_session_id] = record
            return result

    async def _seed_agent_session_state(self, body: AgentSeedSessionRequest) -> AgentSessionState:
        """Check the grants and set the harness up (raise ``AgentSessionSetupError`` to keep partial state)."""
        raise NotImplementedError("This agent does not implement episode sessions")

    async def _close_agent_session_state(self, state: AgentSessionState) -> AgentCloseSessionResponse:
        """Release the harness state; raise (keeping what close needs) if it cannot."""
        raise NotImplementedError("This agent does not implement episode sessions")

    # ---- rollout correlation -------------------------------------------------------------------------

    def _global_config(self) -> Mapping[str, Any] | None:
        config = getattr(self.server_client, "global_config_dict", None)
        return config if isinstance(config, Mapping) else None

    def _model_call_capture_enabled(self) -> bool:
        config = self._global_config()
        return bool(config.get(OBSERVABILITY_ENABLED_KEY_NAME, False)) if config is not None else False

    def _token_id_capture_enabled(self) -> bool:
        config = self._global_config()
        block = (config or {}).get(TOKEN_ID_CAPTURE_BLOCK) or {}
        if not isinstance(block, Mapping) or not block.get("enabled", False):
            return False
        return bool(block.get("all_agents", False)) or bool(self.config.token_id_capture)

    def _capture_correlation_enabled(self) -> bool:
        return self._model_call_capture_enabled() or self._token_id_capture_enabled()

    def rollout_id_from_run(self, body: Any) -> str | None:
        """The rollout id downstream calls of this run carry (``None`` when no capture is configured)."""
        if not self._capture_correlation_enabled():
            return None
        return maybe_rollout_id_from_run_body(body)

    def url_path_for_run(self, url_path: str, body: Any) -> str:
        """``url_path`` under this run's ``/ng-rollout/<id>`` prefix (unchanged without an id)."""
        prefix = rollout_path_prefix(self.rollout_id_from_run(body), token_capture=self._token_id_capture_enabled())
        return f"{prefix}{url_path}"

    def base_url_for_run(self, base_url: str, body: Any) -> str:
        return apply_rollout_prefix(
            base_url, self.rollout_id_from_run(body), token_capture=self._token_id_capture_enabled()
        )

    def url_path_for_request(self, url_path: str, request: Request | None) -> str:
        """Carry an inbound ``/ng-rollout/<id>`` (and a training-capture segment) onto a downstream path."""
        path_params = getattr(request, "path_params", None)
        rollout_id = path_params.get("rollout_id") if isinstance(path_params, Mapping) else None
        token_capture = f"/{TOKEN_CAPTURE_PATH_SEGMENT}/" in getattr(getattr(request, "url", None), "path", "")
        return f"{rollout_path_prefix(rollout_id, token_capture=token_capture)}{url_path}"

    def resolve_model_base_url(self, model_server_name: str, rollout_id: str | None = None) -> str:
        """The ``.../v1`` URL of model server ``model_server_name`` (as ngym resolves names), with the prefix."""
        base_url = resolve_server(model_server_name).base_url.rstrip("/")
        base_url = base_url.removesuffix("/v1")
        prefixed = apply_rollout_prefix(base_url, rollout_id, token_capture=self._token_id_capture_enabled())
        return f"{prefixed}/v1"
