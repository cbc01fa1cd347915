"""The wire protocol's standard routes of every resources server, apart from the class an author subclasses.

``add_standard_routes(app, server)`` mounts ``/seed_session`` (a dataset row, or NeMo Gym 0.7's typed body),
``/verify`` (the author's ``verify``, judge failures turned into reward 0.0), ``/close_session``,
``/aggregate_metrics``, liveness (``/``, ``/healthz``, ``/livez``, ``/readyz``), ``/health`` and
``/reverify_mode``. The handlers call the author's ``seed_session`` / ``verify`` / ``aggregate_metrics`` and
keep sessions through the server's ``SessionManager``. A full store raises ``SessionLimitReached``, which the
middleware answers with one 503 (``ngym.server.pipeline.middleware``).
"""

from __future__ import annotations

import functools
import logging
import typing
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from ngym.errors import JudgeError
from ngym.rewards import HEALTH_KEY as REWARD_RANGE_KEY
from ngym.server.pipeline.intake import parse_body, seed_body_model, validate_body, validate_json
from ngym.server.pipeline.provenance import distribution_of
from ngym.server.pipeline.routing import RequestOnlyRoute, declared_model, declared_model_response
from ngym.server.pipeline.session_budget import session_bytes_report
from ngym.server.protocol.bodies import (
    FAILURE_CLASS_KEY,
    FAILURE_JUDGE_ERROR_KEY,
    BaseVerifyRequest,
    ResourcesCloseSessionRequest,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
)
from ngym.server.sessions.ids import SessionIdRule
from ngym.server.sessions.lost import (
    is_lost,
    keeps_session_state,
    lost_reason,
    session_lost_body,
    watching_session_reads,
)
from ngym.server.sessions.manager import (
    RequestSession,
    SessionConflict,
    SessionElsewhere,
    SessionManager,
    current_request_session,
)
from ngym.server.sessions.routing import RouteSlot

if TYPE_CHECKING:
    from ngym.server.pipeline.resources import SimpleResourcesServer

log = logging.getLogger("ngym.server")

_TYPED_SEED_KEYS = frozenset(ResourcesSeedSessionRequest.model_fields)
MCP_SEED_KEY = "mcp"  # where a row seed's answer advertises the MCP endpoint (NeMo Gym's key)
#: NeMo Gym caps the reason at 2000 characters: it ends up in logs and trace attributes.
_FAILURE_REASON_MAX = 2000
#: ``app.state`` attribute holding the standard routes' ``AuthorCalls`` (where an app extension finds them).
AUTHOR_CALLS_STATE = "ngym_author_calls"
#: What a verify answer echoes of its request: the rollout's row parameters and trajectory.
VERIFY_ECHO = frozenset({"responses_create_params", "response"})
#: True while an in-process caller that reads only what verify adds (a protocol front: the reward, the outcome's
#: own fields) calls ``/verify`` (``ngym.server.fronts.inprocess.RolloutSession.verify``): an answer that is the
#: declared model leaves out ``VERIFY_ECHO`` (tens of kilobytes for a tool environment's row, encoded only to be
#: parsed and dropped). A context variable of the call, never set by an HTTP request: the wire's answer is whole.
verify_echo_left_out: ContextVar[bool] = ContextVar("ngym_verify_echo_left_out", default=False)
_ECHO_LEFT_OUT = set(VERIFY_ECHO)


def add_standard_routes(app: FastAPI, server: SimpleResourcesServer) -> None:
    """Mount the standard routes of ``server`` on ``app`` (its tools are added by the author afterwards)."""
    seed_model = seed_body_model(type(server))
    # Read once here, not per request: the manager is a pydantic private attribute, a ~3 us lookup per read.
    sessions = server.sessions
    author = AuthorCalls(server)
    # Where an app extension finds them to place them elsewhere (the environment loop, for a served app that wants it).
    setattr(app.state, AUTHOR_CALLS_STATE, author)

    async def seed_session(request: Request) -> Any:
        return await seed_session_route(server, request, sessions, author)

    async def close_session(request: Request) -> Any:
        return await close_session_route(server, request, sessions, author)

    # Both take only the request (they read their own bodies): RequestOnlyRoute calls them without FastAPI's
    # per-request parameter machinery.
    app.router.add_api_route(
        "/seed_session",
        seed_session,
        methods=["POST"],
        openapi_extra={"requestBody": {"content": {"application/json": {"schema": seed_model.model_json_schema()}}}},
        summary="Start a rollout's session (dataset row, or NeMo Gym 0.7's typed body)",
        route_class_override=RequestOnlyRoute,
    )
    app.post("/verify", summary="Score a finished rollout")(verify_endpoint(server, author))
    app.router.add_api_route(
        "/close_session",
        close_session,
        methods=["POST"],
        summary="Free a rollout's session",
        route_class_override=RequestOnlyRoute,
    )
    app.post("/aggregate_metrics", summary="Statistics of verify responses")(server.aggregate_metrics)

    async def reverify_mode() -> str:
        return server.resolved_reverify_mode()

    add_health_routes(app, server)
    app.get("/reverify_mode")(reverify_mode)


class AuthorCalls:
    """The author's hooks the standard routes call (read at each call): the server's own methods, until
    ``place`` wraps each (the environment loop does, through an app extension of ``build_app``, for a served app
    that wants it; an app built with ``setup_webserver`` alone, as an environment's own tests build it, keeps them
    where they were). With ``author=None`` a route calls the server's methods directly."""

    def __init__(self, server: SimpleResourcesServer) -> None:
        self.verify: Callable[..., Any] = server.verify
        self.seed_session: Callable[..., Any] = server.seed_session
        self.seed_resources_session: Callable[..., Any] = server.seed_resources_session
        self.close_resources_session: Callable[..., Any] = server.close_resources_session

    def place(self, placement: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Call each hook through ``placement(hook)`` from now on."""
        for name in ("verify", "seed_session", "seed_resources_session", "close_resources_session"):
            setattr(self, name, placement(getattr(self, name)))


def add_health_routes(app: FastAPI, server: SimpleResourcesServer) -> None:
    """Liveness (``/``, ``/healthz``, ``/livez``, ``/readyz``) and readiness (``/health``) on ``app``: what
    ``ngym run``, ``ngym profile`` and the image's HEALTHCHECK wait for. A hand-built app (NeMo Gym's
    Gymnasium-style servers) gets them through ``setup_session_middleware``."""

    async def liveness() -> dict[str, str]:
        return {"status": "ok"}

    async def health() -> dict[str, Any]:
        return await health_report(server)

    for path in ("/", "/healthz", "/livez", "/readyz"):
        app.get(path, include_in_schema=path == "/")(liveness)
    app.get("/health", summary="Readiness: name, domain, version, live sessions")(health)


def _typed_seed_body(raw: bytes) -> tuple[ResourcesSeedSessionRequest, Any] | None:
    """NeMo Gym 0.7's typed seed (exactly its keys) and the parsed row, else None (a dataset row)."""
    if b'"resources_session_id"' not in raw:  # cheap: most seeds are rows
        return None
    data = parse_body(raw)
    if isinstance(data, dict) and data.keys() == _TYPED_SEED_KEYS:
        return validate_body(ResourcesSeedSessionRequest, data), data
    return None


async def seed_session_route(
    server: SimpleResourcesServer, request: Request, sessions: SessionManager, author: AuthorCalls | None = None
) -> Any:
    """``/seed_session``: parse the body once, let the manager keep the session protocol, call the author."""
    raw = await request.body()
    session = server.bound_session(request)
    typed = _typed_seed_body(raw)
    if typed is not None:
        return await _typed_seed(server, request, session, typed[0], sessions, author)
    mcp = server.mcp_exposure
    model = seed_body_model(type(server))
    row: Any = None
    if mcp is None:
        body = validate_json(model, raw.strip())  # straight from the bytes: the row itself is not needed
    else:  # the row's own keys go into the MCP metadata: parsed once, validated from the parsed value
        row = parse_body(raw)
        body = validate_body(model, row)
    seed = author.seed_session if author is not None else server.seed_session
    result = await sessions.seed_row(session, lambda: seed(request, body))
    if mcp is not None:
        answer = result.model_dump(mode="json") if isinstance(result, BaseModel) else dict(result or {})
        answer.setdefault(MCP_SEED_KEY, mcp.seed_metadata(session.id, row if isinstance(row, dict) else {}))
        return answer
    if isinstance(result, BaseModel):
        return Response(result.model_dump_json(), media_type="application/json")
    return result if result is not None else {}


async def _typed_seed(
    server: SimpleResourcesServer,
    request: Request,
    session: RequestSession,
    body: ResourcesSeedSessionRequest,
    sessions: SessionManager,
    author: AuthorCalls | None = None,
) -> Any:
    session_id = _checked_session_id(server, body.resources_session_id)
    seed = author.seed_resources_session if author is not None else server.seed_resources_session
    try:
        result, _ = await sessions.seed_typed(
            session,
            session_id,
            body.episode_id.model_dump(),
            body.task_id.model_dump(),
            lambda: seed(request, body),
        )
    except SessionConflict as exc:
        raise HTTPException(409, str(exc)) from None
    except SessionElsewhere as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None
    # NeMo Gym 0.7.0's ResourcesSeedSessionResponse forbids other keys: only a typed answer's fields are kept.
    answer: dict[str, Any] = {}
    if isinstance(result, ResourcesSeedSessionResponse):
        answer = result.model_dump(mode="json", exclude_none=True)
    elif isinstance(result, dict):
        answer = dict(result)
    answer["resources_session_id"] = session_id
    mcp = server.mcp_exposure
    if mcp is not None and "resources_tools" not in answer:
        answer["resources_tools"] = mcp.seed_metadata(session_id, body.task_data)
    return answer


async def close_session_route(
    server: SimpleResourcesServer, request: Request, sessions: SessionManager, author: AuthorCalls | None = None
) -> Any:
    """``/close_session``: a typed body closes its id once (through the manager), any other the cookie's session."""
    data = parse_body(await request.body())
    close = author.close_resources_session if author is not None else server.close_resources_session
    any_body = server.close_resources_session_takes_any_body
    if isinstance(data, dict) and "resources_session_id" in data:
        body = validate_body(ResourcesCloseSessionRequest, data)
        session_id = _checked_session_id(server, body.resources_session_id)
        author_body: Any = data if any_body else body
        try:
            result, _ = await sessions.close_typed(
                session_id, body.episode_id.model_dump(), lambda: close(request, author_body)
            )
        except SessionConflict as exc:
            raise HTTPException(409, str(exc)) from None
        except SessionElsewhere as exc:
            raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None
        answer = result.model_dump(mode="json", exclude_none=True) if isinstance(result, BaseModel) else {}
        if any_body and result is not None and not isinstance(result, BaseModel):
            return result
        return {**answer, "resources_session_id": session_id}
    session = server.bound_session(request)
    if any_body:
        # NeMo Gym routes every close body to such an override; the cookie's own state is freed once it answered.
        result = await close(request, data or None)  # type: ignore[arg-type]  # an override taking any body
        session.close_after_response()
        return result
    closed_now = await sessions.close_bound(session)
    return {"session_id": session.id, "closed": closed_now}


@functools.cache
def _session_id_rule(max_length: int, pattern: str) -> SessionIdRule:
    return SessionIdRule(max_length, pattern)


def _checked_session_id(server: SimpleResourcesServer, session_id: str) -> str:
    """``session_id`` if it follows the configured rule, else a 422 naming the rule (nothing created)."""
    problem = _session_id_rule(server.config.session_id_max_length, server.config.session_id_pattern).problem(
        session_id
    )
    if problem is not None:
        error = {"type": "session_id", "loc": ("body", "resources_session_id"), "input": session_id}
        raise RequestValidationError([{**error, "msg": f"resources_session_id {problem}"}])
    return session_id


def verify_endpoint(server: SimpleResourcesServer, author: AuthorCalls | None = None) -> Callable[..., Any]:
    """``server.verify`` wrapped: judge failures become reward 0.0; the session closes once verify answered.
    With ``author``, the verify it holds at each call (``AuthorCalls``)."""
    verify = server.verify
    calls = author if author is not None else AuthorCalls(server)
    try:
        declared = declared_model(typing.get_type_hints(type(server).verify).get("return"))
    except Exception:  # an annotation that does not resolve at run time: FastAPI serialises as usual
        declared = None
    stateful = keeps_session_state(type(server))

    @functools.wraps(verify)
    async def endpoint(*args: Any, **kwargs: Any) -> Any:
        if stateful:  # a rollout whose state is gone is masked, never scored (ngym.server.sessions.lost)
            session = current_request_session.get()
            if session is not None and is_lost(session):
                return await _verify_lost(session, score(args, kwargs), args, kwargs)
        return await score(args, kwargs)

    async def score(args: Any, kwargs: Any) -> Any:
        result: Any
        emitted: dict[str, str] = {}
        mcp = server.mcp_exposure
        if mcp is not None:
            kwargs, emitted = _bare_tool_names(kwargs, mcp.server_name)
        try:
            result = await calls.verify(*args, **kwargs)
            if emitted and isinstance(result, BaseVerifyRequest):
                # Score with bare names, echo what the model emitted (the rollout's record stays true).
                for call in result.response.function_calls():
                    call.name = emitted.get(call.call_id, call.name)
            lean = _ECHO_LEFT_OUT if verify_echo_left_out.get() else None
            result = declared_model_response(result, declared, exclude=lean) or result
        except JudgeError as exc:
            body = next((v for v in (*args, *kwargs.values()) if isinstance(v, BaseVerifyRequest)), None)
            log.warning("judge failed in verify: %s", exc)
            result = JSONResponse(judge_failure_body(body, exc))
        # Only a verify that answered frees the session: after a crash (HTTP 500) the caller may retry it.
        session = current_request_session.get()
        if session is not None and server.config.close_session_after_verify:
            session.close_after_response()
        return result

    return endpoint


async def _verify_lost(session: RequestSession, scoring: Awaitable[Any], args: Any, kwargs: Any) -> Any:
    """Verify of a session not held here: score it watching whether the environment reads the session; if it
    does (or fails after reading it, as ``self.sessions[id]`` does), the answer is masked ``session_lost``, else
    it stands (a verify that scores from the request alone does not depend on the lost state)."""
    request = next((v for v in (*args, *kwargs.values()) if isinstance(v, Request)), None)
    body = next((v for v in (*args, *kwargs.values()) if isinstance(v, BaseVerifyRequest)), None)
    with watching_session_reads(request.scope if request is not None else None) as reads:
        try:
            result = await scoring
        except Exception:
            if not reads:
                raise
    if not reads:
        return result
    reason = lost_reason(session)
    log.warning("verify read a session this server does not hold (%s); masked session_lost: %s", reads[0], reason)
    return JSONResponse(session_lost_body(body, reason))


def judge_failure_body(body: BaseModel | None, exc: JudgeError) -> dict[str, Any]:
    """The verify answer when the judge failed, as NeMo Gym 0.7.0's ``judge_failsafe`` writes it.

    The request echoed back with ``reward`` 0.0, masked (``mask_sample``: the reward measures the judge, not
    the policy, so metrics leave it out), ``failure_kind`` "judge_failed" and the message in ``failure_reason``.
    ``instance_config.mask_sample`` and the ``_ng_failure_class`` / ``_ng_failure_judge_error`` pair stay too:
    0.7.0 still writes them for the consumers that read the older names (its rollout collector routes rows
    by ``_ng_failure_class``), so dropping them would break those readers.
    """
    error = str(exc)[:_FAILURE_REASON_MAX]
    echoed = body.model_dump(mode="json") if body is not None else {}
    instance_config = echoed.get("instance_config")
    return {
        **echoed,
        **exc.fields,
        "reward": 0.0,
        "mask_sample": True,
        "failure_kind": exc.failure_class,
        "failure_reason": error,
        "instance_config": {**(instance_config if isinstance(instance_config, dict) else {}), "mask_sample": True},
        FAILURE_CLASS_KEY: exc.failure_class,
        FAILURE_JUDGE_ERROR_KEY: error,
    }


def normalize_tool_name(name: str, server_name: str) -> str:
    """``mcp__<server_name>__<tool>`` (a tool name as an MCP client emits it) → ``<tool>``; any other name
    unchanged."""
    prefix = f"mcp__{server_name}__"
    return name[len(prefix) :] if name.startswith(prefix) else name


def _bare_tool_names(kwargs: dict[str, Any], server_name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Verify arguments with MCP-namespaced tool names (``mcp__<server>__<tool>``) made bare, and the names as
    emitted by call id (empty when there was nothing to change)."""
    for key, value in kwargs.items():
        if not isinstance(value, BaseVerifyRequest):
            continue
        calls = value.response.function_calls()
        if not any(call.name != normalize_tool_name(call.name, server_name) for call in calls):
            return kwargs, {}
        emitted = {call.call_id: call.name for call in calls}
        copy = value.model_copy(deep=True)
        for call in copy.response.function_calls():
            call.name = normalize_tool_name(call.name, server_name)
        return {**kwargs, key: copy}, emitted
    return kwargs, {}


async def health_report(server: SimpleResourcesServer) -> dict[str, Any]:
    """``GET /health``: name, class, domain, providing distribution, live sessions, store."""
    cls = type(server)
    dist = distribution_of(cls)
    domain = server.resolved_domain()
    sessions = server.sessions
    return {
        "status": "ok",
        "name": server.config.name or cls.__name__,
        "server_class": f"{cls.__module__}:{cls.__qualname__}",
        "domain": domain.value if domain else None,
        "plugin": dist[0] if dist else None,
        "version": dist[1] if dist else None,
        "live_sessions": await sessions.store.count(),
        # sessions requests without a seed started (NeMo Gym's lazy ones): held, their limit, and how many were
        # closed to make room (ngym.server.sessions.lazy_share)
        "lazy_sessions": sessions.lazy.as_dict(),
        "session_store": type(sessions.store).__name__,
        "traffic": sessions.traffic.as_dict(),
        "session_bytes": session_bytes_report(sessions.store.records(), server.config.max_session_tool_bytes),
        # this process's routing slot(s) ("1/2": worker 1 of 2; "" alone): ngym status reads each worker by it
        "route_slot": str(RouteSlot.from_env()),
        # what every /verify reward must lie in (ngym rollout and ngym profile check each against it)
        REWARD_RANGE_KEY: list(cls.reward_range) if cls.reward_range is not None else None,
    }
