"""Resources servers: the base classes an environment author subclasses.

``SimpleResourcesServer`` gives every environment the standard routes (``/seed_session``, ``/verify``,
``/close_session``, ``/aggregate_metrics``, liveness and ``/health``), per-rollout sessions and error
handling. An author writes tools, ``seed_session`` and ``verify``, and keeps per-rollout state with
``set_session_state`` / ``session_state``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import logging
import os
import re
import typing
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator

from ngym.domain import Domain
from ngym.errors import JudgeError
from ngym.input_errors import StrictJSONRoute, parse_json, validation_error_handler
from ngym.metrics import aggregate_metrics as compute_aggregate_metrics
from ngym.middleware import NgymMiddleware
from ngym.protocol.bodies import (
    FAILURE_CLASS_KEY,
    FAILURE_JUDGE_ERROR_KEY,
    AggregateMetrics,
    AggregateMetricsRequest,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    ResourcesCloseSessionRequest,
    ResourcesSeedSessionRequest,
)
from ngym.request_limits import RequestLimitsMiddleware
from ngym.server import BaseServer, BaseServerConfig, SimpleServer, secret_value
from ngym.sessions.cookies import CookieSigner, resolve_secret
from ngym.sessions.ids import DEFAULT_SESSION_ID_MAX_LENGTH, DEFAULT_SESSION_ID_PATTERN, SessionIdRule
from ngym.sessions.manager import (
    SCOPE_KEY,
    RequestSession,
    SessionConflict,
    SessionManager,
    current_request_session,
    new_session_id,
)
from ngym.sessions.store import SessionLimitReached, SessionRecord, SessionStore

log = logging.getLogger("ngym.server")

SESSION_STORE_ENV = "NGYM_SESSION_STORE"
_TYPED_SEED_KEYS = frozenset(ResourcesSeedSessionRequest.model_fields)


class BaseResourcesServerConfig(BaseServerConfig):
    """Config of a resources server. Subclass it for your environment's own typed fields."""

    session_secret: SecretStr | None = Field(
        default=None, description="Cookie signing secret; else NGYM_SESSION_SECRET; else random per process."
    )
    session_cookie_name: str = Field(default="ngym_session", pattern=r"^[A-Za-z0-9_\-]+$")
    session_ttl_seconds: float = Field(default=3600.0, gt=0, description="Idle sessions are closed after this.")
    max_sessions: int = Field(default=10_000, ge=1, description="Live sessions at most; a seed beyond gets 503.")
    close_session_after_verify: bool = Field(default=True, description="Free a session's state once verified.")
    session_store: str | None = Field(
        default=None, description="'memory' (default) or a store URL a plugin handles, e.g. redis://host:6379/0"
    )
    session_id_max_length: int = Field(
        default=DEFAULT_SESSION_ID_MAX_LENGTH, ge=1, le=4096, description="Longest caller-chosen session id (422)."
    )
    session_id_pattern: str = Field(
        default=DEFAULT_SESSION_ID_PATTERN, description="Regular expression a caller-chosen session id must match."
    )
    max_closed_sessions: int = Field(
        default=50_000,
        ge=1,
        description="Closed ids remembered (for the TTL) so they cannot be seeded again; oldest out first.",
    )

    @field_validator("session_id_pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return pattern


class ReverifyMode:
    """Values of ``GET /reverify_mode``: whether re-running verify on a stored response is meaningful."""

    STATELESS = "stateless"
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"


class BaseResourcesServer(BaseServer):
    config: BaseResourcesServerConfig


class SimpleResourcesServer(BaseResourcesServer, SimpleServer):
    """Base class of an environment. Override ``seed_session`` (optional), ``verify``, and add tool routes.

    Class attributes an environment may set:

    - ``domain``: its ``Domain`` (required, here or in the config).
    - ``session_state_model``: a pydantic model class when the session state is one (lets serialising
      stores such as Redis share it across workers and replicas).
    - ``session_affinity_required``: True when state is live and cannot be shared (a process, a socket).
    - ``reverify_mode``: ``"stateless"`` when re-running verify on a stored response is meaningful.
    - ``always_full_reward``: True when the reward does not depend on the response (``ngym validate``'s
      soundness pass then skips its "must not score 1.0" checks).
    """

    config: BaseResourcesServerConfig

    domain: ClassVar[Domain | None] = None
    session_state_model: ClassVar[type[BaseModel] | None] = None
    session_affinity_required: ClassVar[bool] = False
    reverify_mode: ClassVar[str] = ReverifyMode.UNKNOWN
    always_full_reward: ClassVar[bool] = False

    # ---- for environment authors -------------------------------------------------------------------

    async def seed_session(self, request: Request, body: BaseSeedSessionRequest) -> BaseSeedSessionResponse:
        """Start a rollout's state from its dataset row. The default keeps no state."""
        return BaseSeedSessionResponse()

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        """Score the finished rollout; return the body echoed back with ``reward`` in [0, 1]."""
        raise NotImplementedError(f"{type(self).__name__} must implement verify()")

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        """Free what a session's state holds. Called once per session: on ``/close_session``, after
        ``/verify`` (``close_session_after_verify``), when idle longer than the TTL, and at shutdown."""

    async def on_startup(self) -> None:
        """Called when the app starts serving (load templates, start worker pools)."""

    async def on_shutdown(self) -> None:
        """Called when the app stops, after every live session was closed."""

    def session_state(self, request: Request | None = None, *, required: bool = True) -> Any:
        """The state of the request's session, as set by ``set_session_state`` at seed.

        Raises HTTP 409 with an explanation when the request has no live seeded session and ``required``.
        Without ``request``, the session of the request being served (a context variable) is used.
        """
        session = self._request_session(request)
        if session.record is None:
            if required:
                raise HTTPException(
                    409,
                    "no seeded session for this request: call POST /seed_session first and send its cookie "
                    "back with every request (the session may also have been closed or have expired)",
                )
            return None
        return session.record.state

    def set_session_state(self, request: Request | None, state: Any) -> None:
        """Set (or replace) the state of the request's session. Call it in ``seed_session`` or any tool."""
        session = self._request_session(request)
        if session.record is None:
            raise HTTPException(409, "no seeded session for this request: call POST /seed_session first")
        session.record.state = state

    def session_id(self, request: Request | None = None) -> str:
        """The id of the request's session (also at ``request.session["session_id"]``)."""
        return self._request_session(request).id

    # ---- the app -----------------------------------------------------------------------------------

    def setup_webserver(self) -> FastAPI:
        """Build the app with the standard routes; override, call ``super()``, and add your tools."""
        name = self.config.name or type(self).__name__
        app = FastAPI(title=name, description=self.describe(), lifespan=self._lifespan)
        app.router.route_class = StrictJSONRoute  # before any route, the environment's tools included
        app.add_exception_handler(RequestValidationError, validation_error_handler)
        self._sessions = self._make_session_manager()
        config = self.config
        # Added first, so it runs inside NgymMiddleware: its 413/408 answers carry the session cookie too.
        app.add_middleware(
            RequestLimitsMiddleware,
            max_body_bytes=config.max_request_body_bytes,
            body_timeout_seconds=config.request_body_timeout_seconds,
        )
        app.add_middleware(NgymMiddleware, sessions=self._sessions)
        seed_model = self._seed_body_model()
        app.post(
            "/seed_session",
            openapi_extra={
                "requestBody": {"content": {"application/json": {"schema": seed_model.model_json_schema()}}}
            },
            summary="Start a rollout's session (dataset row, or NeMo Gym 0.7's typed body)",
        )(self._seed_session_route)
        app.post("/verify", summary="Score a finished rollout")(self._verify_endpoint())
        app.post("/close_session", summary="Free a rollout's session")(self._close_session_route)
        app.post("/aggregate_metrics", summary="Statistics of verify responses")(self.aggregate_metrics)
        for path in ("/", "/healthz", "/livez", "/readyz"):
            app.get(path, include_in_schema=path == "/")(self._liveness)
        app.get("/health", summary="Readiness: name, domain, version, live sessions")(self._health)
        app.get("/reverify_mode")(self._reverify_mode)
        return app

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        """Mean/max/min/median/std of every numeric field of the verify responses, per task and overall."""
        return compute_aggregate_metrics(body.verify_responses)

    @classmethod
    def describe(cls) -> str:
        """One line saying what the environment is (``description`` or the docstring's first line)."""
        if cls.description:
            return cls.description
        doc = inspect.getdoc(cls) or ""
        own = cls.__doc__ is not None and cls.__doc__ is not SimpleResourcesServer.__doc__
        return doc.strip().splitlines()[0] if own and doc else ""

    def resolved_domain(self) -> Domain | None:
        declared = type(self).domain
        return self.config.domain or (Domain.parse(declared) if declared is not None else None)

    # ---- internals ---------------------------------------------------------------------------------

    _sessions: SessionManager | None = None  # set by setup_webserver (a plain class attribute, not a field)
    _session_id_rule: SessionIdRule | None = None  # built on first use from the config

    def _make_session_manager(self) -> SessionManager:
        secret, given = resolve_secret(secret_value(self.config.session_secret))
        if not given and (self.config.num_workers or 1) > 1:
            log.warning(
                "no session secret configured: each worker makes its own, so they reject each other's "
                "cookies; set NGYM_SESSION_SECRET or session_secret"
            )
        store = self._make_store()
        # Servers that keep nothing to free skip the hook call on every close.
        frees_state = type(self).on_session_closed is not SimpleResourcesServer.on_session_closed
        hook = self._close_hook if frees_state else None
        return SessionManager(store, CookieSigner(secret, self.config.session_cookie_name), hook)

    def _make_store(self) -> SessionStore:
        from ngym.sessions.factory import create_session_store

        url = self.config.session_store or os.environ.get(SESSION_STORE_ENV) or "memory"
        return create_session_store(url, server=self)

    async def _close_hook(self, session_id: str, state: Any) -> None:
        await self.on_session_closed(session_id, state)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        await self.on_startup()
        assert self._sessions is not None
        self._sessions.start_sweeper()
        try:
            yield
        finally:
            await self._sessions.shutdown()
            await self.on_shutdown()

    def _request_session(self, request: Request | None) -> RequestSession:
        session = request.scope.get(SCOPE_KEY) if request is not None else current_request_session.get()
        if session is None:
            raise RuntimeError("no ngym session bound: is NgymMiddleware installed (call super().setup_webserver())?")
        return session

    @classmethod
    @functools.cache
    def _seed_body_model(cls) -> type[BaseModel]:
        hints = typing.get_type_hints(cls.seed_session)
        annotation = hints.get("body", BaseSeedSessionRequest)
        # NeMo Gym's own examples annotate `RowModel | ResourcesSeedSessionRequest`: take the row model.
        for candidate in typing.get_args(annotation) or (annotation,):
            is_model = isinstance(candidate, type) and issubclass(candidate, BaseModel)
            if is_model and candidate is not ResourcesSeedSessionRequest:
                return candidate
        return BaseSeedSessionRequest

    async def _read_json(self, request: Request) -> Any:
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            return parse_json(raw)
        except ValueError as exc:
            raise HTTPException(400, f"request body is not valid JSON: {exc}") from None

    def _validate(self, model: type[BaseModel], data: Any) -> BaseModel:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False)) from None

    def _validate_json(self, model: type[BaseModel], raw: bytes) -> BaseModel:
        """Validate straight from bytes (pydantic's own JSON parser: no intermediate dict)."""
        try:
            return model.model_validate_json(raw or b"{}")
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            if errors and errors[0]["type"] == "json_invalid":
                raise HTTPException(400, f"request body is not valid JSON: {errors[0]['msg']}") from None
            raise RequestValidationError(errors) from None

    async def _seed_session_route(self, request: Request) -> Any:
        raw = await request.body()
        session = self._request_session(request)
        sessions = self._sessions
        assert sessions is not None
        if b'"resources_session_id"' in raw:  # maybe NeMo Gym 0.7's typed body: look at its keys
            data = await self._read_json(request)
            if isinstance(data, dict) and data.keys() == _TYPED_SEED_KEYS:
                return await self._typed_seed(request, session, self._validate(ResourcesSeedSessionRequest, data))
        body = self._validate_json(self._seed_body_model(), raw.strip())
        if session.record is not None:  # a new seed on a live cookie restarts that rollout
            await sessions.close(session.id)
        try:
            await sessions.ensure_capacity()
        except SessionLimitReached as exc:
            return _busy(exc)
        session.id, session.record, session.is_new = new_session_id(), SessionRecord(), True
        request.scope["session"]["session_id"] = session.id
        result = await self.seed_session(request, body)
        await sessions.store.create(session.id, session.record)
        if isinstance(result, BaseModel):
            return Response(result.model_dump_json(), media_type="application/json")
        return result if result is not None else {}

    async def _typed_seed(self, request: Request, session: RequestSession, body: ResourcesSeedSessionRequest) -> Any:
        sessions = self._sessions
        assert sessions is not None
        session_id = self._checked_session_id(body.resources_session_id)
        meta = {"episode_id": body.episode_id.model_dump(), "task_id": body.task_id.model_dump()}
        if await sessions.store.closed_meta(session_id) is not None:
            raise HTTPException(409, f"resources session {session_id!r} was closed; it cannot be seeded again")
        try:
            with sessions.seeding(session_id):
                existing = await sessions.store.load(session_id)
                if existing is not None:
                    if existing.meta.get("episode_id") != meta["episode_id"]:
                        raise HTTPException(409, f"resources session {session_id!r} is seeded for another episode")
                    session.id, session.record = session_id, existing
                    request.scope["session"]["session_id"] = session_id
                    return {"resources_session_id": session_id}
                try:
                    await sessions.ensure_capacity()
                except SessionLimitReached as exc:
                    return _busy(exc)
                row = self._validate(self._seed_body_model(), body.task_data)
                session.id, session.record, session.is_new = session_id, SessionRecord(meta=meta), True
                request.scope["session"]["session_id"] = session_id
                result = await self.seed_session(request, row)
                await sessions.store.create(session_id, session.record)
        except SessionConflict as exc:
            raise HTTPException(409, str(exc)) from None
        extra = result.model_dump() if isinstance(result, BaseModel) else dict(result or {})
        return {**extra, "resources_session_id": session_id}

    async def _close_session_route(self, request: Request) -> Any:
        data = await self._read_json(request)
        sessions = self._sessions
        assert sessions is not None
        if isinstance(data, dict) and "resources_session_id" in data:
            body = self._validate(ResourcesCloseSessionRequest, data)
            session_id, episode = self._checked_session_id(body.resources_session_id), body.episode_id.model_dump()
            closed = await sessions.store.closed_meta(session_id)
            if closed is not None:
                if closed.get("episode") != _episode_digest(episode):
                    raise HTTPException(409, f"resources session {session_id!r} was closed for another episode")
                return {"resources_session_id": session_id}
            live = await sessions.store.load(session_id)
            if live is not None and live.meta.get("episode_id") != episode:
                raise HTTPException(409, f"resources session {session_id!r} belongs to another episode")
            # Remember the close first, so a seed racing with it cannot resurrect the session.
            await sessions.store.mark_closed(session_id, {"episode": _episode_digest(episode)})
            await sessions.close(session_id)
            return {"resources_session_id": session_id}
        session = self._request_session(request)
        closed_now = await sessions.close(session.id)
        session.record = None
        return {"session_id": session.id, "closed": closed_now}

    def _checked_session_id(self, session_id: str) -> str:
        """``session_id`` if it follows the configured rule, else a 422 naming the rule (nothing created)."""
        rule = self._session_id_rule
        if rule is None:
            rule = self._session_id_rule = SessionIdRule(
                self.config.session_id_max_length, self.config.session_id_pattern
            )
        problem = rule.problem(session_id)
        if problem is not None:
            error = {"type": "session_id", "loc": ("body", "resources_session_id"), "input": session_id}
            raise RequestValidationError([{**error, "msg": f"resources_session_id {problem}"}])
        return session_id

    def _verify_endpoint(self) -> Callable[..., Any]:
        """``self.verify`` wrapped: judge failures become reward 0.0; the session closes once verify answered."""
        verify = self.verify
        try:
            declared = typing.get_type_hints(type(self).verify).get("return")
        except Exception:  # an annotation that does not resolve at run time: FastAPI serialises as usual
            declared = None
        if not (isinstance(declared, type) and issubclass(declared, BaseModel)):
            declared = None

        @functools.wraps(verify)
        async def endpoint(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await verify(*args, **kwargs)
                if type(result) is declared:
                    # Exactly the declared response model, already validated: what FastAPI would send (its
                    # response_model pass dumps, re-validates and serialises it: ~50 us per rollout), in one step.
                    result = Response(result.model_dump_json(by_alias=True), media_type="application/json")
            except JudgeError as exc:
                body = next((v for v in (*args, *kwargs.values()) if isinstance(v, BaseVerifyRequest)), None)
                log.warning("judge failed in verify: %s", exc)
                echoed = body.model_dump(mode="json") if body is not None else {}
                result = JSONResponse(
                    {**echoed, "reward": 0.0, FAILURE_CLASS_KEY: exc.failure_class, FAILURE_JUDGE_ERROR_KEY: str(exc)}
                )
            # Only a verify that answered frees the session: after a crash (HTTP 500) the caller may retry it.
            session = current_request_session.get()
            if session is not None and self.config.close_session_after_verify and session.record is not None:
                session.close_requested = True
            return result

        return endpoint

    async def _liveness(self) -> dict[str, str]:
        return {"status": "ok"}

    async def _health(self) -> dict[str, Any]:
        from ngym.plugins.info import distribution_of

        dist = distribution_of(type(self))
        domain = self.resolved_domain()
        assert self._sessions is not None
        return {
            "status": "ok",
            "name": self.config.name or type(self).__name__,
            "server_class": f"{type(self).__module__}:{type(self).__qualname__}",
            "domain": domain.value if domain else None,
            "plugin": dist[0] if dist else None,
            "version": dist[1] if dist else None,
            "live_sessions": await self._sessions.store.count(),
            "session_store": type(self._sessions.store).__name__,
        }

    async def _reverify_mode(self) -> str:
        return self.reverify_mode


def _busy(exc: SessionLimitReached) -> JSONResponse:
    return JSONResponse(
        {"detail": f"server is at its session limit ({exc}); retry later or close finished sessions"},
        status_code=503,
        headers={"Retry-After": "1"},
    )


def _episode_digest(episode: dict[str, Any]) -> str:
    """A fixed-size stand-in for an episode id, kept with a closed session id: a caller's ``rollout_id`` may be
    of any length, and a close (no seed needed) must not pin it in memory."""
    canonical = json.dumps(episode, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def default_instance_name(cls: type) -> str:
    """``WeatherResourcesServer`` → ``weather_resources_server``."""
    return _SNAKE.sub("_", cls.__name__).lower()
