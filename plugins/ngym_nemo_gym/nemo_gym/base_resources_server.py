"""NeMo Gym's resources-server base classes, as subclasses of ngym's.

An environment written for NeMo Gym subclasses ``SimpleResourcesServer`` from here and so is an ngym environment:
ngym's sessions (signed cookie, bounded store, ``/close_session``), ``/health``, the typed seed flow, the
judge-failure path and ``ngym run/validate/containerize/profile`` apply unchanged. What differs from ngym's own
class, so NeMo Gym code runs as written:

- ``seed_session`` may be written ``(self, body)`` (NeMo Gym's default) or ``(self, request, body)``;
- the config class carries ``REVERIFY_MODE`` (served at ``GET /reverify_mode``) and ``expose_tools_over_mcp``;
- ``server_client`` is a field (a ``ServerClient`` resolving names through ngym's run config by default);
- request bodies carry the OpenAI SDK's response types (``NeMoGymResponse``), not ngym's lighter models;
- ``setup_session_middleware(app)`` gives a hand-built app (Gymnasium-style ``/reset`` + ``/step``) sessions;
- the bare app (``setup_webserver()``) lets an exception propagate, as NeMo Gym's does (its tests expect it through
  ``TestClient``); the app ngym serves answers it as HTTP 500 with ``repr(e)``, as NeMo's ``run_webserver`` does.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.routing import BaseRoute

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
from ngym.server.middleware import raise_server_exceptions

# ngym's own body helpers (400 on bad JSON, 422 with field errors), so both answer alike.
from ngym.server.routes import _read_json as read_json_body
from ngym.server.routes import _validate as validated
from ngym.server.sessions import current_request_session
from ngym.server.sessions.lost import keeps_no_state

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
    resources_tools: dict[str, Any] | None = None
    #: NeMo's typed model (environments build it: swebench_pro's seed), serialised to the same JSON object
    sandbox_access: SandboxAccess | None = None  # type: ignore[assignment]


class BaseRunRequest(ngym.BaseRunRequest):
    responses_create_params: NeMoGymResponseCreateParamsNonStreaming  # type: ignore[assignment]
    capture_rollout_id: str | None = Field(default=None, alias="_ng_rollout_id", exclude=True)


class BaseVerifyRequest(BaseRunRequest, ngym.BaseVerifyRequest):
    responses_create_params: NeMoGymResponseCreateParamsNonStreaming  # type: ignore[assignment]
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


def _dual_form_seed(seed: Any) -> Any:
    """``seed_session(self, body)`` made callable as ngym calls it, ``(request, body)``, and still as written."""

    @functools.wraps(seed)
    async def seed_session(self: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 2:  # ngym's route: (request, body)
            args = args[1:]
        kwargs.pop("request", None)
        return await seed(self, *args, **kwargs)

    return seed_session


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
        seed = cls.__dict__.get("seed_session")
        if seed is not None and not _takes_request(seed):
            cls.seed_session = _dual_form_seed(seed)  # type: ignore[method-assign]

    def setup_webserver(self) -> FastAPI:
        """ngym's app; a server that handles NeMo Gym 0.7's typed seed or close itself gets those bodies."""
        app = super().setup_webserver()
        raise_server_exceptions(app, True)  # NeMo's bare app: errors reach a test's TestClient (see server_utils)
        if self._handles_typed_seed():
            _replace_route(app, "/seed_session", self._typed_seed_or)
        if type(self).close_resources_session is not SimpleResourcesServer.close_resources_session:
            _replace_route(app, "/close_session", self._typed_close_or)
        return app

    def _handles_typed_seed(self) -> bool:
        seed = inspect.unwrap(type(self).seed_session)
        if type(self).seed_session is SimpleResourcesServer.seed_session:
            return False
        try:
            annotation = typing.get_type_hints(seed).get("body")
        except Exception:  # an annotation that does not resolve: treat the seed as a dataset-row seed
            return False
        return ResourcesSeedSessionRequest in (typing.get_args(annotation) or (annotation,))

    def _typed_seed_or(self, original: Callable[..., Any]) -> Callable[..., Any]:
        async def seed_session(request: Request) -> Any:
            data = await read_json_body(request)  # cached by Starlette: the original endpoint reads it again
            if isinstance(data, dict) and data.keys() == set(ResourcesSeedSessionRequest.model_fields):
                body = validated(ResourcesSeedSessionRequest, data)
                return await _call(self.seed_session, request, body)
            return await original(request)

        return seed_session

    def _close_takes_typed_body_only(self) -> bool:
        close = inspect.unwrap(type(self).close_resources_session)
        try:
            annotation = typing.get_type_hints(close).get("body")
        except Exception:  # an annotation that does not resolve: treat it as the typed close
            return True
        return ResourcesCloseSessionRequest in (typing.get_args(annotation) or (annotation,))

    def _typed_close_or(self, original: Callable[..., Any]) -> Callable[..., Any]:
        if not self._close_takes_typed_body_only():
            # An override taking any body (swebench_pro's `body: dict | None`) gets every /close_session, as NeMo
            # Gym routes them all to it; ngym's own state of the cookie's session is freed after it answered.
            async def close_any(request: Request) -> Any:
                data = await read_json_body(request)
                result = await _call(self.close_resources_session, request, data or None)
                session = current_request_session.get()
                if session is not None and session.record is not None:
                    session.close_requested = True
                return result

            return close_any

        async def close_session(request: Request) -> Any:
            data = await read_json_body(request)  # cached by Starlette: the original endpoint reads it again
            if isinstance(data, dict) and "resources_session_id" in data:
                return await _call(self.close_resources_session, request, validated(ResourcesCloseSessionRequest, data))
            return await original(request)

        return close_session

    @keeps_no_state
    async def seed_session(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Keep no state: a typed seed gets its id back, a dataset row an empty answer."""
        body = kwargs.get("body", args[-1] if args else None)
        if isinstance(body, ResourcesSeedSessionRequest):
            return ResourcesSeedSessionResponse(resources_session_id=body.resources_session_id)
        return BaseSeedSessionResponse()

    async def close_resources_session(self, body: ResourcesCloseSessionRequest) -> ResourcesCloseSessionResponse:
        """NeMo Gym's hook for a typed close; ngym's ``/close_session`` already frees ngym-held state."""
        return ResourcesCloseSessionResponse(resources_session_id=body.resources_session_id)

    async def on_shutdown(self) -> None:
        await close_client_session()  # the HTTP session ServerClient calls went through, if any

    async def get_reverify_mode(self) -> ReverifyMode:
        return type(self).config_class().REVERIFY_MODE  # type: ignore[attr-defined,no-any-return]

    def normalize_tool_name(self, name: str) -> str:
        """``mcp__<this server>__tool`` → ``tool`` (names MCP clients record); other names unchanged."""
        prefix = f"mcp__{self.config.name or type(self).__name__}__"
        return name[len(prefix) :] if name.startswith(prefix) else name

    def mcp_allowed_tools_for_session(self, seed_body: dict[str, Any]) -> list[str] | None:
        return None


# Set after the class is made, so pydantic does not take it for a field. NeMo Gym's Gymnasium base and games keep
# ``session_state: Dict[str, Any]`` as a field of their own.
SimpleResourcesServer.session_state = _YieldsToField("session_state", ngym.SimpleResourcesServer.session_state)  # type: ignore[assignment]


def _replace_route(app: FastAPI, path: str, make_endpoint: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Swap the POST route at ``path`` for ``make_endpoint(original endpoint)`` (which falls back to the original)."""
    routes: list[BaseRoute] = app.router.routes
    for index, route in enumerate(routes):
        if getattr(route, "path", None) == path and "POST" in (getattr(route, "methods", None) or ()):
            original = route.endpoint  # type: ignore[attr-defined]
            del routes[index]
            app.post(path, summary=getattr(route, "summary", None))(make_endpoint(original))
            routes.insert(index, routes.pop())
            return
    raise RuntimeError(f"no POST {path} route to extend")


async def _call(method: Callable[..., Any], request: Request, body: BaseModel) -> Any:
    """Call an environment's handler as FastAPI would: with ``request`` when its signature asks for it."""
    if _takes_request(method.__func__ if inspect.ismethod(method) else method):
        return await method(request=request, body=body)
    return await method(body)
