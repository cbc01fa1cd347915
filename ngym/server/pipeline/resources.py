"""Resources servers: the base classes an environment author subclasses.

``SimpleResourcesServer`` gives every environment the standard routes (``/seed_session``, ``/verify``,
``/close_session``, ``/aggregate_metrics``, liveness and ``/health``: handled in ``ngym.server.pipeline.routes``),
per-rollout sessions and error handling. An author writes tools, ``seed_session`` and ``verify``, and keeps
per-rollout state with ``set_session_state`` / ``session_state``. This class is that surface, not the home
of the wire protocol.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, SecretStr

from ngym.domain import Domain, resolve_domain
from ngym.metrics.aggregate import aggregate_metrics as compute_aggregate_metrics
from ngym.metrics.aggregate import default_key_metrics
from ngym.server.pipeline.base import BaseServer, BaseServerConfig, SimpleServer, secret_value
from ngym.server.pipeline.extensions import placed_for
from ngym.server.pipeline.intake import seed_body_model, validate_body, validation_error_handler
from ngym.server.pipeline.middleware import NgymMiddleware
from ngym.server.pipeline.request_limits import RequestLimitsMiddleware
from ngym.server.pipeline.routes import add_health_routes, add_standard_routes
from ngym.server.pipeline.routing import StrictJSONRoute
from ngym.server.pipeline.session_budget import (
    DEFAULT_MAX_SESSION_TOOL_BYTES,
    DEFAULT_MAX_TOOL_ANSWER_BYTES,
    DEFAULT_MAX_TOOL_CALL_BYTES,
    SessionBudgetMiddleware,
)
from ngym.server.protocol.bodies import (
    AggregateMetrics,
    AggregateMetricsRequest,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
)
from ngym.server.protocol.reverify import ReverifyMode
from ngym.server.sessions.cookies import CookieSigner, resolve_secret
from ngym.server.sessions.factory import create_session_store
from ngym.server.sessions.ids import DEFAULT_SESSION_ID_MAX_LENGTH, DEFAULT_SESSION_ID_PATTERN, SessionIdPattern
from ngym.server.sessions.lazy_share import lazy_share_of
from ngym.server.sessions.lost import LostSessionGuard, keeps_no_state, keeps_session_state, note_lost_session_read
from ngym.server.sessions.manager import SCOPE_KEY, RequestSession, SessionManager, current_request_session
from ngym.server.sessions.store import SessionStore

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ngym.server.fronts.mcp import MCPExposure, MCPTool

log = logging.getLogger("ngym.server")

SESSION_STORE_ENV = "NGYM_SESSION_STORE"
#: ``app.state`` attribute set once ``install_sessions`` ran on an app.
SESSIONS_INSTALLED = "ngym_session_middleware_installed"


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
    expose_tools_over_mcp: bool = Field(
        default=False,
        description="Also serve the tool routes over MCP (streamable HTTP at /mcp) inside each rollout's session; "
        "the seed response then carries the endpoint and the session's token.",
    )
    session_id_max_length: int = Field(
        default=DEFAULT_SESSION_ID_MAX_LENGTH, ge=1, le=4096, description="Longest caller-chosen session id (422)."
    )
    session_id_pattern: SessionIdPattern = Field(
        default=DEFAULT_SESSION_ID_PATTERN, description="Regular expression a caller-chosen session id must match."
    )
    max_tool_call_bytes: int = Field(
        default=DEFAULT_MAX_TOOL_CALL_BYTES,
        ge=1024,
        description="Largest body (arguments) of one tool call; larger is 413 before the tool runs.",
    )
    max_session_tool_bytes: int = Field(
        default=DEFAULT_MAX_SESSION_TOOL_BYTES,
        ge=1024,
        description="Bytes one session may send in tool calls in all; the call past it is 413 (seed a new session).",
    )
    max_tool_answer_bytes: int = Field(
        default=DEFAULT_MAX_TOOL_ANSWER_BYTES,
        ge=1024,
        description="Largest tool answer (declared length); a larger one is replaced by a 413 naming this setting.",
    )
    max_lazy_sessions: int | None = Field(
        default=None,
        ge=1,
        description="Sessions a request without a seed may start (NeMo Gym's lazy sessions) at most (default: "
        "max_sessions); a seed that finds the store full closes the least recently used one.",
    )
    lazy_sessions_full: Literal["evict_oldest", "refuse"] = Field(
        default="evict_oldest",
        description="A lazy start past max_lazy_sessions closes the least recently used lazy session, or is a 503.",
    )
    max_closed_sessions: int = Field(
        default=50_000,
        ge=1,
        description="Closed ids remembered (for the TTL) so they cannot be seeded again; oldest out first.",
    )

    #: NeMo Gym 0.7.0 declares the reverify mode on the config class; ``GET /reverify_mode`` reads it when set,
    #: else the server class's ``reverify_mode``.
    REVERIFY_MODE: ClassVar[ReverifyMode] = ReverifyMode.UNKNOWN


class BaseResourcesServer(BaseServer):
    config: BaseResourcesServerConfig


class SimpleResourcesServer(BaseResourcesServer, SimpleServer):
    """Base class of an environment. Override ``seed_session`` (optional), ``verify``, and add tool routes.

    Class attributes an environment may set:

    - ``domain``: its ``Domain`` (required, here or in the config).
    - ``session_state_model``: a pydantic model class when the session state is one (lets serialising
      stores such as Redis share it across workers and replicas).
    - ``session_affinity_required``: True when state is live and cannot be shared (a process, a socket).
    - ``keeps_session_state``: whether a lost session loses the rollout (verify masked ``session_lost``, tool
      calls 410); default: True when the class declares a state model, needs affinity or writes ``seed_session``.
    - ``reverify_mode``: ``"stateless"`` when re-running verify on a stored response is meaningful.
    - ``always_full_reward``: True when the reward does not depend on the response (``ngym validate``'s
      soundness pass then skips its "must not score 1.0" checks).
    - ``reward_range``: the ``(low, high)`` a ``/verify`` reward must lie in (checked by ``validate``, ``rollout``,
      ``profile``; in ``/health``); default ``(0.0, 1.0)``; None for another ecosystem's rewards at their own scale.
    - ``tool_outcomes``: tool routes answer ``{"output", "finished"}`` or a refusal (``ngym.server.fronts.outcomes``).
    - ``required_env``: the environment variables the server cannot start without, each with what it is
      (``{"DIPG_DATASET_PATH": "a JSONL file of dataset rows"}``); ``ngym run``, ``validate``, ``prepare`` and
      ``containerize --run`` (whose ``-e`` gives them to the container) stop with one line naming a missing one.
      A config may add its own under ``required_env:``.
    - ``not_containerizable``: why ``ngym containerize`` cannot package this server (None: it can); the
      command then stops with that reason instead of building an image that cannot serve.
    - ``close_resources_session_takes_any_body``: True when ``close_resources_session`` takes every
      ``/close_session`` body (a dict, or None when empty), as NeMo Gym routes them all to it.
    - ``own_event_loop``: True to run this server's coroutines (``verify``, seeds, closes, its ``async``
      method routes, ``on_startup``/``on_shutdown``) on an event loop of their own in one thread, off the loop
      that serves requests (``ngym.server.hosting.env_loop``): for an environment whose handlers block (fork, join,
      CPU work) the other rollouts' requests and ``/health`` stop waiting behind them. False: never. None
      (default): when its own modules use ``multiprocessing``. ``NGYM_ENV_LOOP=1``/``0`` overrides it per process.

    The standard routes dispatch to ``seed_session`` (a dataset row), ``seed_resources_session`` and
    ``close_resources_session`` (NeMo Gym 0.7's typed bodies) and ``verify``; ``self.sessions`` (the
    ``SessionManager``) keeps the session protocol around them: bounded, idempotent, closed once.
    """

    config: BaseResourcesServerConfig

    domain: ClassVar[Domain | None] = None
    session_state_model: ClassVar[type[BaseModel] | None] = None
    session_affinity_required: ClassVar[bool] = False
    reverify_mode: ClassVar[str] = ReverifyMode.UNKNOWN.value
    always_full_reward: ClassVar[bool] = False
    reward_range: ClassVar[tuple[float, float] | None] = (0.0, 1.0)
    required_env: ClassVar[dict[str, str]] = {}
    not_containerizable: ClassVar[str | None] = None
    close_resources_session_takes_any_body: ClassVar[bool] = False
    own_event_loop: ClassVar[bool | None] = None
    tool_outcomes: ClassVar[bool] = False

    # ---- for environment authors -------------------------------------------------------------------

    if TYPE_CHECKING:
        # An environment's seed_session and verify take its own body models (subclasses of the base ones) and
        # verify may take the Request first: the routes read the override's annotations to validate the body and
        # call it with what it takes. So to a type checker an override is an async callable of its own shape
        # whose answer is checked, not a method that must accept every base body.
        seed_session: ClassVar[Callable[..., Awaitable[BaseSeedSessionResponse]]]
        verify: ClassVar[Callable[..., Awaitable[BaseVerifyResponse]]]
    else:

        @keeps_no_state
        async def seed_session(self, request: Request, body: BaseSeedSessionRequest) -> BaseSeedSessionResponse:
            """Start a rollout's state from its dataset row. The default keeps no state."""
            return BaseSeedSessionResponse()

        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            """Score the finished rollout; return the body echoed back with ``reward`` in [0, 1]. Override it as
            ``verify(self, body: MyVerifyRequest)`` or ``verify(self, request: Request, body: MyVerifyRequest)``."""
            raise NotImplementedError(f"{type(self).__name__} must implement verify()")

    async def seed_resources_session(
        self, request: Request, body: ResourcesSeedSessionRequest
    ) -> ResourcesSeedSessionResponse | dict[str, Any] | None:
        """Start a rollout's state from NeMo Gym 0.7's typed body (an Environment Server's seed).

        Runs inside the session ``body.resources_session_id``, which the manager made and bound to the request
        (capacity checked; a repeat for the same episode, a closed id or another episode never gets here). The
        default validates ``body.task_data`` as ``seed_session``'s row model (422 if it is not one) and calls
        ``seed_session``. An answer's fields (``resources_tools``, ``sandbox_access``) go to the caller.
        """
        row = validate_body(seed_body_model(type(self)), body.task_data)
        await self.seed_session(request, row)
        return None

    async def close_resources_session(
        self, request: Request, body: ResourcesCloseSessionRequest
    ) -> ResourcesCloseSessionResponse | dict[str, Any] | None:
        """Release what a typed session holds outside ngym's store (NeMo Gym 0.7's name).

        Called once per ``resources_session_id`` (a repeated close answers without calling it), before the id
        is recorded as closed and ``on_session_closed`` runs: raise when releasing fails and nothing is recorded,
        so the caller may retry. The default releases nothing.
        """
        return None

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        """Free what a session's state holds. Called once per session: on ``/close_session``, after
        ``/verify`` (``close_session_after_verify``), when idle longer than the TTL, and at shutdown."""

    async def forget_unseeded_session(self, session_id: str) -> None:
        """Free what a request that carried no session kept under its one-off ``session_id``.

        A request without a session cookie is given an id of its own that no answer hands out, so nothing can name
        it again once the request is answered: anything the environment keyed by it would never be freed. Called
        after each such request when a subclass overrides it (NeMo Gym ported code keys its own dicts by
        ``request.session["session_id"]``: the compat layer drops that key from them)."""

    async def on_startup(self) -> None:
        """Called when the app starts serving (load templates, start worker pools)."""

    async def on_shutdown(self) -> None:
        """Called when the app stops, after every live session was closed."""

    def session_state(self, request: Request | None = None, *, required: bool = True) -> Any:
        """The state of the request's session, as set by ``set_session_state`` at seed.

        Raises HTTP 409 with an explanation when the request has no live seeded session and ``required``.
        Without ``request``, the session of the request being served (a context variable) is used.
        """
        session = self.bound_session(request)
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
        session = self.bound_session(request)
        if session.record is None:
            raise HTTPException(409, "no seeded session for this request: call POST /seed_session first")
        session.record.state = state

    def mcp_tools(self, harvested: list[MCPTool], catchall: Any = None) -> list[MCPTool] | None:
        """The tools served over MCP when ``expose_tools_over_mcp`` is on (default: every tool route).

        Override to leave some out (filter ``harvested`` by ``.name``) or to expose none (return None or []).
        NeMo Gym's signature: ``catchall`` is its parameterised catch-all route, which ngym has none of (None)."""
        return harvested

    def mcp_allowed_tools_for_session(self, seed_body: dict[str, Any]) -> list[str] | None:
        """The tools one rollout may list and call over MCP, or None (the default) for all of them.

        ``seed_body`` is the row the rollout was seeded with (a typed seed's ``task_data``). The answer is
        signed into the rollout's MCP token, so it holds for every later call of that rollout."""
        return None

    def session_id(self, request: Request | None = None) -> str:
        """The id of the request's session (also at ``request.session["session_id"]``)."""
        return self.bound_session(request).id

    def bound_session(self, request: Request | None = None) -> RequestSession:
        """The session the request is bound to (without ``request``: the request being served)."""
        session = request.scope.get(SCOPE_KEY) if request is not None else current_request_session.get()
        if session is None:
            raise RuntimeError("no ngym session bound: is NgymMiddleware installed (call super().setup_webserver())?")
        if session.record is None:  # a verify reading a lost session is masked (ngym.server.sessions.lost)
            note_lost_session_read("session_state()")
        return session

    @property
    def sessions(self) -> SessionManager:
        """This server's session manager (made by ``setup_webserver`` or ``install_sessions``)."""
        sessions = self._ngym_sessions
        if sessions is None:
            raise RuntimeError(f"{type(self).__name__} has no sessions yet: call setup_webserver() first")
        return sessions

    @property
    def mcp_exposure(self) -> MCPExposure | None:
        """The ``/mcp`` exposure when ``expose_tools_over_mcp`` is on, else None."""
        # The config flag first: ``_mcp`` is a pydantic private attribute whose every read costs ~3 us, per request.
        return self._mcp if self.config.expose_tools_over_mcp else None

    @mcp_exposure.setter
    def mcp_exposure(self, exposure: MCPExposure | None) -> None:
        self._mcp = exposure

    # ---- the app -----------------------------------------------------------------------------------

    def setup_webserver(self) -> FastAPI:
        """Build the app with the standard routes; override, call ``super()``, and add your tools."""
        name = self.config.name or type(self).__name__
        app = FastAPI(title=name, description=self.describe(), lifespan=self._lifespan)
        app.router.route_class = StrictJSONRoute  # before any route, the environment's tools included
        app.add_exception_handler(RequestValidationError, validation_error_handler)
        self._ngym_sessions = self._make_session_manager()
        config = self.config
        if keeps_session_state(type(self)):  # innermost: a tool call of a lost session is 410 before it runs
            app.add_middleware(LostSessionGuard)
        self._add_session_budget(app)
        # Added first, so it runs inside NgymMiddleware: its 413/408 answers carry the session cookie too.
        app.add_middleware(
            RequestLimitsMiddleware,
            max_body_bytes=config.max_request_body_bytes,
            body_timeout_seconds=config.request_body_timeout_seconds,
        )
        app.add_middleware(NgymMiddleware, sessions=self._ngym_sessions)
        add_standard_routes(app, self)
        return app

    def _add_session_budget(self, app: FastAPI) -> None:
        """The per-session budgets (``ngym.server.pipeline.session_budget``), inside ``NgymMiddleware``."""
        config = self.config
        app.add_middleware(
            SessionBudgetMiddleware,
            max_tool_call_bytes=config.max_tool_call_bytes,
            max_session_bytes=config.max_session_tool_bytes,
            max_answer_bytes=config.max_tool_answer_bytes,
        )

    def install_sessions(self, app: FastAPI) -> SessionManager:
        """Give an app built by hand (not by ``setup_webserver``: NeMo Gym's Gymnasium-style servers) ngym's
        sessions: the signed-cookie middleware, the store and its idle sweeper, this server's start-up and
        shutdown hooks (the app's lifespan), and ``/health`` when it has none. Idempotent per app."""
        if getattr(app.state, SESSIONS_INSTALLED, False):
            return self.sessions
        setattr(app.state, SESSIONS_INSTALLED, True)
        if not any(getattr(route, "path", None) == "/health" for route in app.router.routes):
            add_health_routes(app, self)  # ngym run, profile and the image's HEALTHCHECK wait on /health
        self._ngym_sessions = self._make_session_manager()
        self._add_session_budget(app)
        app.add_middleware(NgymMiddleware, sessions=self._ngym_sessions)
        app.router.lifespan_context = self._lifespan
        return self._ngym_sessions

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        """Mean/max/min/median/std of every numeric field of the verify responses, per task and overall,
        plus what ``compute_metrics`` adds; ``key_metrics`` is what ``get_key_metrics`` picks; with several
        repeats, ``repeat_level_metrics`` (one row per repeat, with what ``compute_repeat_metrics`` adds)."""
        return compute_aggregate_metrics(
            body.verify_responses,
            compute_metrics_fn=self.compute_metrics,
            get_key_metrics_fn=self.get_key_metrics,
            compute_repeat_metrics_fn=self.compute_repeat_metrics,
        )

    def compute_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """Metrics of the whole run, merged into ``agent_metrics`` (NeMo Gym's hook, same signature).

        ``tasks[i]`` holds the verify responses of task ``i`` (by ``_ng_task_index``), masked samples left out.
        Override it for pass@k / majority@k / per-subset numbers (see ``ngym.metrics.reward_profile``). A
        ``"per_task_metrics"`` list of dicts with ``_ng_task_index`` is merged into ``group_level_metrics``.
        """
        return {}

    def compute_repeat_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """Metrics of one repeat of the run (NeMo Gym's hook, same signature), when tasks were rolled out several
        times (``_ng_rollout_index`` 0, 1, ...).

        Called once per repeat with that repeat's verify responses grouped by task (masked samples left out).
        The numbers it returns go into that repeat's row of ``repeat_level_metrics`` (replacing a generic metric
        of the same name) and are summarised across repeats in ``agent_metrics`` (``mean_across_repeats/<name>``,
        ``std_across_repeats/<name>``, ``ci_low_95_across_repeats/<name>``, ...). A metric is dropped unless it is
        a finite number in every repeat. Typically ``compute_metrics``'s point estimates, run on one repeat.
        """
        return {}

    def get_key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        """The headline metrics picked from ``agent_metrics`` (NeMo Gym's hook, same signature).

        The default picks every statistic of ``reward`` (``mean/reward``, ``pass@k/reward``, ...).
        """
        return default_key_metrics(agent_metrics)

    def resolved_reverify_mode(self) -> str:
        """``GET /reverify_mode``: the config class's ``REVERIFY_MODE`` when it sets one, else ``reverify_mode``."""
        configured = type(self.config).REVERIFY_MODE
        mode = configured if configured is not ReverifyMode.UNKNOWN else self.reverify_mode
        return mode.value if isinstance(mode, ReverifyMode) else str(mode)

    @classmethod
    def describe(cls) -> str:
        """One line saying what the environment is (``description`` or the docstring's first line)."""
        if cls.description:
            return cls.description
        doc = inspect.getdoc(cls) or ""
        own = cls.__doc__ is not None and cls.__doc__ is not SimpleResourcesServer.__doc__
        return doc.strip().splitlines()[0] if own and doc else ""

    @classmethod
    def data_folder(cls) -> Path | None:
        """The folder whose ``data/example.jsonl`` holds the rows the ORS and OpenEnv fronts serve: the class's file's
        folder; a plugin serving installed environments through one generated class returns the folder it wrote."""
        with contextlib.suppress(TypeError, OSError):
            return Path(inspect.getfile(cls)).resolve().parent
        return None

    def resolved_domain(self) -> Domain | None:
        """The domain ``build_server`` resolved into the config (else the class's, for a server built by hand)."""
        return self.config.domain or resolve_domain(type(self).domain)

    # ---- internals ---------------------------------------------------------------------------------

    # Set by setup_webserver. Not `_sessions`: environments ported from NeMo Gym keep their own dicts under that name.
    _ngym_sessions: SessionManager | None = None
    _mcp: MCPExposure | None = None  # ``mcp_exposure``, set by ngym.server.fronts.mcp.install

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
        forgets = type(self).forget_unseeded_session is not SimpleResourcesServer.forget_unseeded_session
        return SessionManager(
            store,
            CookieSigner(secret, self.config.session_cookie_name),
            hook,
            on_unseeded_done=self.forget_unseeded_session if forgets else None,
            lazy=lazy_share_of(self.config.max_lazy_sessions, self.config.max_sessions, self.config.lazy_sessions_full),
        )

    def _make_store(self) -> SessionStore:
        url = self.config.session_store or os.environ.get(SESSION_STORE_ENV) or "memory"
        return create_session_store(url, server=self)

    async def _close_hook(self, session_id: str, state: Any) -> None:
        await self.on_session_closed(session_id, state)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        # The author's hooks run where its handlers run (the environment loop when it has one): what they
        # make bound to a loop (a client session, a semaphore) is used on the loop it was made on.
        on_startup, on_shutdown = placed_for(app, self.on_startup), placed_for(app, self.on_shutdown)
        handlers = placed_for(app, _run_event_handlers)
        await on_startup()
        # FastAPI runs ``@app.on_event("startup")`` handlers only with its default lifespan, which this one
        # replaces: run them here, so an app's own handlers (NeMo Gym's competitive_coding_challenges loads its
        # evaluator in one, and refuses to start without its sandbox) run as they would on a plain FastAPI app.
        await handlers(getattr(app.router, "on_startup", ()))
        assert self._ngym_sessions is not None
        self._ngym_sessions.start_sweeper()
        await self._ngym_sessions.warn_if_store_is_down()
        try:
            yield
        finally:
            await self._ngym_sessions.shutdown()
            await handlers(getattr(app.router, "on_shutdown", ()))
            await on_shutdown()


async def _run_event_handlers(handlers: Any) -> None:
    """Call FastAPI event handlers (``app.on_event(...)``) in order, awaiting the async ones."""
    for handler in list(handlers):
        result = handler()
        if inspect.isawaitable(result):
            await result
