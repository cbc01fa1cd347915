"""NeMo Gym's resources-server base classes, as subclasses of ngym's.

An environment written for NeMo Gym subclasses ``SimpleResourcesServer`` from here and so is an ngym environment:
ngym's sessions (signed cookie, bounded store, ``/close_session``), ``/health``, the typed seed flow, the
judge-failure path and ``ngym run/validate/containerize/profile`` apply unchanged. What differs from ngym's own
class, so NeMo Gym code runs as written:

- ``seed_session`` and ``close_resources_session`` may be written ``(self, body)`` (NeMo Gym's default) or
  ``(self, request, body)``; a ``seed_session`` taking NeMo Gym 0.7's typed body is this class's
  ``seed_resources_session`` (ngym's routes dispatch to it inside the session the manager made: session bound,
  idempotent repeats, no seed after a close), and ``close_resources_session`` is called once per typed close;
- the config class carries ``REVERIFY_MODE`` (served at ``GET /reverify_mode``) and ``expose_tools_over_mcp``;
- ``server_client`` is a field (a ``ServerClient`` resolving names through ngym's run config by default);
- request bodies carry the OpenAI SDK's response types (``NeMoGymResponse``), not ngym's lighter models;
- ``setup_session_middleware(app)`` gives a hand-built app (Gymnasium-style ``/reset`` + ``/step``) sessions;
- the bare app (``setup_webserver()``) lets an exception propagate, as NeMo Gym's does (its tests expect it through
  ``TestClient``); the app ngym serves answers it as HTTP 500 with ``repr(e)``, as NeMo's ``run_webserver`` does.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from typing import Any, Generic, TypeVar

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

import ngym
from nemo_gym.config_types import AggregateMetrics, AggregateMetricsRequest
from nemo_gym.episode_types import EpisodeId, TaskId
from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.reward_profile import AggregateMetricsMixin
from nemo_gym.sandbox.access import SandboxAccess
from nemo_gym.server_utils import SimpleServer, close_client_session
from ngym import (
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
)
from ngym.plugin_api import keeps_no_state, raise_server_exceptions

__all__ = [
    "AggregateMetrics",
    "AggregateMetricsRequest",
    "BaseMultiRewardVerifyResponse",
    "BaseResourcesServer",
    "BaseResourcesServerConfig",
    "BaseRunRequest",
    "BaseSeedSessionRequest",
    "BaseSeedSessionResponse",
    "BaseVerifyRequest",
    "BaseVerifyResponse",
    "NeMoGymResponse",
    "ResourcesCloseSessionRequest",
    "ResourcesCloseSessionResponse",
    "ResourcesSeedSessionRequest",
    "ResourcesSeedSessionResponse",
    "ResourcesVerifyRequest",
    "ReverifyMode",
    "SimpleResourcesServer",
]


ReverifyMode = ngym.ReverifyMode
#: ngym's config already carries NeMo Gym 0.7.0's ``REVERIFY_MODE`` and ``expose_tools_over_mcp``.
BaseResourcesServerConfig = ngym.BaseResourcesServerConfig


class ResourcesSeedSessionResponse(ngym.ResourcesSeedSessionResponse):
    #: NeMo Gym 0.7.0 types it a plain dict: kept as the environment built it, not validated as ngym's MCP metadata
    resources_tools: dict[str, Any] | None = None  # type: ignore[assignment]
    #: NeMo's typed model (environments build it: swebench_pro's seed), serialised to the same JSON object
    sandbox_access: SandboxAccess | None = None  # type: ignore[assignment]


class BaseRunRequest(ngym.BaseRunRequest):
    responses_create_params: NeMoGymResponseCreateParamsNonStreaming
    capture_rollout_id: str | None = Field(default=None, alias="_ng_rollout_id", exclude=True)


class BaseVerifyRequest(BaseRunRequest, ngym.BaseVerifyRequest):
    responses_create_params: NeMoGymResponseCreateParamsNonStreaming
    #: NeMo Gym's response is the OpenAI SDK's model (environments read its fields), not ngym's own Response
    response: NeMoGymResponse  # type: ignore[assignment]


class BaseVerifyResponse(BaseVerifyRequest, ngym.BaseVerifyResponse):
    """The request echoed with ``reward`` and ngym's ``mask_sample`` / ``failure_kind`` / ``failure_reason``."""


class BaseMultiRewardVerifyResponse(BaseVerifyResponse, ngym.BaseMultiRewardVerifyResponse):
    """Several objectives in ``reward_components``; ``reward`` is their scalar aggregate."""


VerificationInputT = TypeVar("VerificationInputT")


class ResourcesVerifyRequest(BaseModel, Generic[VerificationInputT]):
    model_config = ConfigDict(extra="forbid")

    episode_id: EpisodeId
    task_id: TaskId
    verification_input: VerificationInputT


class BaseResourcesServer(ngym.BaseResourcesServer):
    config: BaseResourcesServerConfig


def _takes_request(function: Any) -> bool:
    parameters = list(inspect.signature(function).parameters)
    return len(parameters) >= 3 or "request" in parameters


def _dual_form(method: Any) -> Any:
    """``method(self, body)`` made callable as ngym calls it, ``(request, body)``, and still as written."""

    @functools.wraps(method)
    async def dual_form(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 2:  # ngym's routes: (request, body)
            args = args[1:]
        kwargs.pop("request", None)
        return await method(self, *args, **kwargs)

    return dual_form


def _annotated_body_types(method: Any) -> tuple[Any, ...] | None:
    """The types ``method``'s ``body`` is annotated with (a union's members), or None when it does not resolve."""
    try:
        annotation = typing.get_type_hints(inspect.unwrap(method)).get("body")
    except Exception:  # an annotation that does not resolve at run time
        return None
    return typing.get_args(annotation) or (annotation,)


class _YieldsToField:
    """An ngym method name a NeMo Gym environment may declare as its own field (``session_state: dict``).

    On an instance whose class declares the field, the field's value; else ngym's method. On the class it is
    absent (AttributeError), so pydantic takes a subclass's inherited default from the field, not the method.
    """

    def __init__(self, name: str, method: Any) -> None:
        self.name, self.method = name, method

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            raise AttributeError(self.name)
        if self.name in instance.__dict__:
            return instance.__dict__[self.name]
        return self.method.__get__(instance, owner)

    def __set__(self, instance: Any, value: Any) -> None:
        instance.__dict__[self.name] = value


class SimpleResourcesServer(BaseResourcesServer, AggregateMetricsMixin, SimpleServer, ngym.SimpleResourcesServer):
    """NeMo Gym's ``SimpleResourcesServer`` on ngym: write ``verify``, optionally ``seed_session``, and tools."""

    config: BaseResourcesServerConfig

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for name in ("seed_session", "close_resources_session"):
            method = cls.__dict__.get(name)
            if method is not None and not _takes_request(method):
                setattr(cls, name, _dual_form(method))
        close = cls.__dict__.get("close_resources_session")
        if close is not None:
            # An override taking any body (swebench_pro's `body: dict | None`) gets every /close_session, as NeMo
            # Gym routes them all to it. An annotation that does not resolve is taken for the typed close.
            types = _annotated_body_types(close)
            cls.close_resources_session_takes_any_body = types is not None and ResourcesCloseSessionRequest not in types

    def setup_webserver(self) -> FastAPI:
        """ngym's app, whose errors reach a test's TestClient as NeMo Gym's bare app's do (see server_utils)."""
        app = super().setup_webserver()
        raise_server_exceptions(app, True)
        return app

    async def seed_resources_session(self, request: Request, body: ResourcesSeedSessionRequest) -> Any:
        """NeMo Gym 0.7's typed seed: the environment's own ``seed_session`` when it takes the typed body, else
        ngym's (``task_data`` validated as the row model, then ``seed_session``)."""
        if _handles_typed_seed(type(self)):
            return await self.seed_session(request, body)
        return await super().seed_resources_session(request, body)

    @keeps_no_state
    async def seed_session(self, *args: Any, **kwargs: Any) -> Any:
        """Keep no state: a typed seed gets its id back, a dataset row an empty answer."""
        body = kwargs.get("body", args[-1] if args else None)
        if isinstance(body, ResourcesSeedSessionRequest):
            return ResourcesSeedSessionResponse(resources_session_id=body.resources_session_id)
        return BaseSeedSessionResponse()

    async def close_resources_session(self, *args: Any, **kwargs: Any) -> Any:
        """NeMo Gym's hook for a typed close, ``(body)`` or ``(request, body)``; the default releases nothing."""
        body = kwargs.get("body", args[-1] if args else None)
        if not isinstance(body, ResourcesCloseSessionRequest):  # the routes give the default only a typed close
            raise TypeError(f"close_resources_session takes NeMo Gym's typed close body, not {type(body).__name__}")
        return ResourcesCloseSessionResponse(resources_session_id=body.resources_session_id)

    async def forget_unseeded_session(self, session_id: str) -> None:
        """A request without a session cookie was answered: drop its one-off id from the dicts this server keeps
        (NeMo Gym's ``self.session_id_to_counter.setdefault(request.session["session_id"], 0)`` in a tool called
        without a seed would otherwise add an entry per call that nothing ever frees)."""
        _drop_key_from_own_dicts(self, session_id)

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        """A session closed (``/close_session``, after ``/verify``, idle TTL, shutdown): drop its id from the dicts
        this server keeps, as NeMo Gym code keys its per-rollout state by ``request.session["session_id"]`` and
        frees none of it."""
        _drop_key_from_own_dicts(self, session_id)

    async def on_shutdown(self) -> None:
        await close_client_session()  # the HTTP session ServerClient calls went through, if any

    async def get_reverify_mode(self) -> ReverifyMode:
        config_class = type(self).config_class()
        if issubclass(config_class, ngym.BaseResourcesServerConfig):  # NeMo Gym 0.7.0 declares it on the config
            return config_class.REVERIFY_MODE
        return ReverifyMode.UNKNOWN

    def normalize_tool_name(self, name: str) -> str:
        """``mcp__<this server>__tool`` → ``tool`` (names MCP clients record); other names unchanged."""
        prefix = f"mcp__{self.config.name or type(self).__name__}__"
        return name[len(prefix) :] if name.startswith(prefix) else name

    def mcp_allowed_tools_for_session(self, seed_body: dict[str, Any]) -> list[str] | None:
        return None


def _drop_key_from_own_dicts(server: Any, key: str) -> None:
    """``pop(key)`` from every dict the server holds directly (its fields, its private attributes)."""
    private = getattr(server, "__pydantic_private__", None) or {}
    for value in (*vars(server).values(), *private.values()):
        if isinstance(value, dict) and key in value:
            with contextlib.suppress(KeyError, TypeError):  # a concurrent pop, a dict subclass that refuses
                del value[key]


# Set after the class is made, so pydantic does not take it for a field. NeMo Gym's Gymnasium base and games keep
# ``session_state: Dict[str, Any]`` as a field of their own.
SimpleResourcesServer.session_state = _YieldsToField(  # type: ignore[assignment]  # a descriptor for the method
    "session_state", ngym.SimpleResourcesServer.session_state
)


@functools.cache
def _handles_typed_seed(cls: type[SimpleResourcesServer]) -> bool:
    """Whether ``cls``'s own ``seed_session`` takes NeMo Gym 0.7's typed body (its annotation names it)."""
    if cls.seed_session is SimpleResourcesServer.seed_session:
        return False
    types = _annotated_body_types(cls.seed_session)
    return types is not None and ResourcesSeedSessionRequest in types
