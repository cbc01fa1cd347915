"""NeMo Gym's server plumbing: ``ServerClient`` (call another server by name), HTTP helpers, server bases.

``ServerClient.post(server_name=..., url_path=..., json=...)`` answers an ``aiohttp.ClientResponse`` whose body is
already read, as NeMo Gym's does (environments call ``raise_for_status`` / ``get_response_json`` on it, or its own
``.json()``). Names resolve through :mod:`ngym_nemo_gym.servers`: ``ngym run --model-url NAME=URL`` or the YAML
configs ``ngym run`` was given.

A call that cannot reach its server (no URL configured, connection refused after retries) raises
:class:`ServerCallError`, and a non-2xx answer passed to :func:`raise_for_status` raises
:class:`ServerResponseError` (an ``aiohttp.ClientResponseError``). Both are ngym ``JudgeError``s: inside
``verify`` they become reward 0.0 with the judge-failure fields, never an HTTP 500.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any, ClassVar, Literal

import aiohttp
import orjson
from aiohttp import ClientResponse, ClientResponseError
from fastapi import FastAPI
from ngym_nemo_gym.servers import (
    ServerNotConfigured,
    ServerTarget,
    global_config,
    instance_fields,
    resolve_server,
)
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

import ngym
from nemo_gym.config_types import ROLLOUT_PATH_PREFIX, TOKEN_CAPTURE_PATH_SEGMENT
from nemo_gym.global_config import (
    get_first_server_config_dict,
    get_global_config_dict,
    maybe_get_global_config_dict,
)
from nemo_gym.server_middleware import ClientDisconnectCancellationMiddleware, add_exception_middleware
from ngym import JudgeError
from ngym.plugin_api import raise_server_exceptions

__all__ = [
    "MAX_NUM_TRIES",
    "GlobalAIOHTTPAsyncClientConfig",
    "get_global_aiohttp_client",
    "get_global_config_dict",
    "global_aiohttp_client_exit",
    "is_global_aiohttp_client_setup",
    "set_global_aiohttp_client",
    "ROLLOUT_PATH_PREFIX",
    "apply_rollout_prefix",
    "SESSION_ID_KEY",
    "BaseServer",
    "ClientResponse",
    "ClientResponseError",
    "ServerCallError",
    "ServerClient",
    "ServerResponseError",
    "SimpleServer",
    "get_first_server_config_dict",
    "get_response_json",
    "get_server_url",
    "is_nemo_gym_fastapi_entrypoint",
    "raise_for_status",
    "request",
    "rollout_path_prefix",
]

SESSION_ID_KEY = "session_id"
MAX_NUM_TRIES = 3
ServerStatus = Literal["success", "connection_error", "timeout", "unknown_error"]


class ServerCallError(JudgeError):
    """A call to another server failed before any answer (no URL for the name, connection refused, timeout)."""


class ServerResponseError(ClientResponseError, JudgeError):
    """Another server answered with a non-2xx status; ``response_content`` holds its body.

    Its message carries the start of that body (what says why: a verify's ``failure_reason`` is built from it);
    ``nemo_text`` is the text NeMo Gym's own error would have (aiohttp's alone), which the rollout collector
    writes so that its failures file matches NeMo Gym's line for line.
    """

    response_content: bytes | None = None
    nemo_text: str | None = None


# Reported under aiohttp's name, as NeMo Gym's (plain aiohttp) error is: environments and their tests record and
# match the ``ClientResponseError: ...`` text of a failed judge call.
ServerResponseError.__name__ = ServerResponseError.__qualname__ = "ClientResponseError"


# One aiohttp session per event loop: sessions are bound to the loop that made them, and tests run many loops.
_client_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)


#: NeMo Gym's process-wide client, when code sets one up itself (``set_global_aiohttp_client``); otherwise each
#: event loop gets its own session above.
_GLOBAL_AIOHTTP_CLIENT: aiohttp.ClientSession | None = None


class GlobalAIOHTTPAsyncClientConfig(BaseModel):
    """Connection limits of the process-wide client (NeMo's global-config keys; 0 means unlimited)."""

    model_config = ConfigDict(extra="ignore")  # validated from the whole global config, as NeMo does

    global_aiohttp_connector_limit: int = Field(default=100 * 1024, ge=0)
    global_aiohttp_connector_limit_per_host: int = Field(default=1024, ge=0)
    global_aiohttp_client_request_debug: bool = False


def set_global_aiohttp_client(cfg: GlobalAIOHTTPAsyncClientConfig) -> aiohttp.ClientSession:
    """Make the process-wide client every ``request`` uses from now on (one only: exit the old one first)."""
    global _GLOBAL_AIOHTTP_CLIENT
    if _GLOBAL_AIOHTTP_CLIENT is not None:
        raise AssertionError(  # NeMo asserts here: code and tests that expect it catch AssertionError
            "There is already a global aiohttp client; call global_aiohttp_client_exit() before making another"
        )
    connector = aiohttp.TCPConnector(
        limit=cfg.global_aiohttp_connector_limit, limit_per_host=cfg.global_aiohttp_connector_limit_per_host
    )
    # No cookie jar: a shared client must not carry one rollout's session cookie into another's calls.
    _GLOBAL_AIOHTTP_CLIENT = aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(), cookie_jar=aiohttp.DummyCookieJar()
    )
    return _GLOBAL_AIOHTTP_CLIENT


def is_global_aiohttp_client_setup() -> bool:
    return _GLOBAL_AIOHTTP_CLIENT is not None


def get_global_aiohttp_client() -> aiohttp.ClientSession:
    """The process-wide client, made with the run's config on first use."""
    if _GLOBAL_AIOHTTP_CLIENT is not None:
        return _GLOBAL_AIOHTTP_CLIENT
    return set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig.model_validate(dict(global_config())))


def global_aiohttp_client_exit() -> None:
    """Close and forget the process-wide client (``request`` falls back to per-loop sessions); callable from
    synchronous code, as in NeMo Gym (inside a running loop the close is scheduled on it)."""
    global _GLOBAL_AIOHTTP_CLIENT
    client, _GLOBAL_AIOHTTP_CLIENT = _GLOBAL_AIOHTTP_CLIENT, None
    if client is None or client.closed:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(client.close())
    else:
        _closing.add(task := loop.create_task(client.close()))
        task.add_done_callback(_closing.discard)


_closing: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks


def _client_session() -> aiohttp.ClientSession:
    if _GLOBAL_AIOHTTP_CLIENT is not None and not _GLOBAL_AIOHTTP_CLIENT.closed:
        return _GLOBAL_AIOHTTP_CLIENT
    loop = asyncio.get_running_loop()
    session = _client_sessions.get(loop)
    if session is None or session.closed:
        # Bounded as NeMo Gym bounds its process-wide client (``global_aiohttp_connector_limit*``: 1,024 connections
        # per judge by default), not by aiohttp's default of 100 in all: with more rollouts than that verifying at
        # once, judge calls would queue here for a connection while NeMo Gym sends them to the judge's batcher.
        try:
            cfg = GlobalAIOHTTPAsyncClientConfig.model_validate(dict(global_config()))
        except ValidationError as exc:  # a judge failure (masked, with the reason), not a 500
            raise ServerCallError(f"the run's global_aiohttp_* settings are invalid: {exc}") from None
        connector = aiohttp.TCPConnector(
            limit=cfg.global_aiohttp_connector_limit, limit_per_host=cfg.global_aiohttp_connector_limit_per_host
        )
        session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
        _client_sessions[loop] = session
    return session


async def close_client_session() -> None:
    """Close this event loop's shared HTTP session (a server calls it when it shuts down)."""
    session = _client_sessions.pop(asyncio.get_running_loop(), None)
    if session is not None and not session.closed:
        await session.close()


async def request(method: str, url: str, _max_connection_retries: int | None = None, **kwargs: Any) -> ClientResponse:
    """Send one HTTP request; connection failures are retried (``MAX_NUM_TRIES`` attempts, backing off).

    The body is read before returning, so the response can be read again after the connection is released.
    """
    if kwargs.get("json") is not None:  # orjson: faster, and handles datetimes the stdlib encoder refuses
        kwargs["data"] = orjson.dumps(kwargs.pop("json"))
        kwargs["headers"] = {**(kwargs.get("headers") or {}), "Content-Type": "application/json"}
    tries = _max_connection_retries or MAX_NUM_TRIES
    for attempt in range(1, tries + 1):
        try:
            response = await _client_session().request(method, url, **kwargs)
            await response.read()  # the whole body, cached on the response; the connection goes back to the pool
            return response
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            if attempt == tries:
                raise ServerCallError(f"{method} {url} failed after {tries} attempts: {exc!r}") from exc
            await asyncio.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


#: How much of a failed answer's body its error message carries.
_ANSWER_IN_MESSAGE = 300


async def raise_for_status(response: ClientResponse, content: bytes | None = None) -> None:
    """Raise :class:`ServerResponseError` (with ``response_content``) when the answer is not 2xx.

    The response's own ``raise_for_status`` decides, as in NeMo Gym (so a test's stand-in response works too).
    """
    if response.ok:
        return
    if content is None:
        # NeMo reads the body from the stream (``response.content``), which test doubles fill; a real response
        # that ``request`` already read has its body cached instead.
        content = await response.content.read() or await response.read()
    try:
        response.raise_for_status()
    except ClientResponseError as exc:
        # The answer's own text in the message: it is what says why ("no recording for this input", "model not
        # found"), and str(exc) is what reaches the verify answer's failure_reason (aiohttp's alone: "Bad Request").
        said = (content or b"").decode("utf-8", "replace").strip()[:_ANSWER_IN_MESSAGE]
        message = f"{exc.message}: {said}" if said else exc.message
        error = ServerResponseError(exc.request_info, exc.history, status=exc.status, message=message)
        error.response_content = content
        error.nemo_text = str(exc)
        raise error from exc


async def get_response_json(response: ClientResponse) -> Any:
    return orjson.loads(await response.read())


def get_server_url(server_name: str) -> str:
    """Where server ``server_name`` listens: as ngym resolves names (``--model-url``, the run's configs), else
    NeMo's way, the ``host``/``port`` of that instance in ``get_global_config_dict()`` (which code and tests may
    replace on this module)."""
    try:
        return resolve_server(server_name).base_url
    except ServerNotConfigured:
        fields = instance_fields(get_global_config_dict() or {}, server_name)
        if fields and fields.get("host") and fields.get("port"):
            return f"http://{fields['host']}:{fields['port']}"
        raise


def rollout_path_prefix(rollout_id: str | None, *, token_capture: bool = False) -> str:
    """``/ng-rollout/<id>`` (the tracing prefix servers strip), or ``""`` without an id."""
    if not rollout_id:
        return ""
    prefix = f"/{ROLLOUT_PATH_PREFIX}/{rollout_id}"
    return f"{prefix}/{TOKEN_CAPTURE_PATH_SEGMENT}" if token_capture else prefix


def apply_rollout_prefix(base_url: str, rollout_id: str | None, *, token_capture: bool = False) -> str:
    """``base_url`` with the rollout's ``/ng-rollout/<id>`` prefix appended (unchanged without an id)."""
    if not rollout_id:
        return base_url
    return base_url.rstrip("/") + rollout_path_prefix(rollout_id, token_capture=token_capture)


def is_nemo_gym_fastapi_entrypoint(file: str) -> bool:
    """NeMo Gym's worker processes import the app module by file; ngym serves through its own launcher."""
    return False


class ServerClient(BaseModel):
    """Calls the other servers of a run by their instance names (``judge_model``, ``user_simulator``, ...).

    ``global_config_dict`` (optional) is a NeMo Gym-shaped config consulted after the URLs and configs ngym was
    given; without it, :mod:`ngym_nemo_gym.servers` decides alone.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    head_server_config: Any = None
    #: the run's global config, as NeMo Gym gives every server's client: environments read their judge's
    #: instance from it (``get_first_server_config_dict(server_client.global_config_dict, name)``)
    global_config_dict: Any = Field(default_factory=get_global_config_dict)

    @classmethod
    def load_from_global_config(cls, head_server_config: Any = None) -> ServerClient:
        return cls(head_server_config=head_server_config)

    #: Base URLs by server name, consulted first (NeMo caches resolved names here; tests put servers in it).
    _server_base_urls: dict[str, str] = PrivateAttr(default_factory=dict)

    def _resolve_base_url(self, server_name: str) -> str:
        return self._target(server_name).base_url

    def _target(self, server_name: str) -> ServerTarget:
        cached = self._server_base_urls.get(server_name)
        if cached is not None:
            return ServerTarget(server_name, cached)
        try:
            return resolve_server(server_name)
        except ServerNotConfigured as exc:
            fields = instance_fields(self.global_config_dict or {}, server_name)
            if fields and fields.get("host") and fields.get("port"):
                return ServerTarget(server_name, f"http://{fields['host']}:{fields['port']}")
            raise ServerCallError(str(exc)) from None

    def _build_server_base_url(self, server_config_dict: Any) -> str:
        """``http://host:port`` of an instance's fields (NeMo Gym's name; environments call it), given as an
        OmegaConf node (attribute access, as NeMo passes it) or a plain dict."""
        fields = server_config_dict if isinstance(server_config_dict, dict) else None
        host = fields["host"] if fields is not None else server_config_dict.host
        port = fields["port"] if fields is not None else server_config_dict.port
        return f"http://{host}:{port}"

    async def request(self, server_name: str, url_path: str, method: str, **kwargs: Any) -> ClientResponse:
        target = self._target(server_name)
        body = kwargs.get("json")
        if isinstance(body, BaseModel):
            kwargs["json"] = body.model_dump(mode="json", exclude_unset=True)
        headers = {**target.headers(), **(kwargs.pop("headers", None) or {})}
        return await request(method, target.url_for(url_path), headers=headers, **kwargs)

    async def get(self, server_name: str, url_path: str, **kwargs: Any) -> ClientResponse:
        return await self.request(server_name=server_name, url_path=url_path, method="GET", **kwargs)

    async def post(self, server_name: str, url_path: str, **kwargs: Any) -> ClientResponse:
        return await self.request(server_name=server_name, url_path=url_path, method="POST", **kwargs)

    def poll_for_status(self, server_name: str, *, timeout_seconds: float = 5) -> ServerStatus:
        import urllib.error
        import urllib.request

        try:
            url = self._target(server_name).base_url
            urllib.request.urlopen(url, timeout=timeout_seconds)  # noqa: S310 - a configured server's own URL
            return "success"
        except urllib.error.HTTPError:
            return "success"  # it answered: there may be no route at /
        except TimeoutError:
            return "timeout"
        except (urllib.error.URLError, ServerCallError):
            return "connection_error"
        except Exception:
            return "unknown_error"


class BaseServer(ngym.BaseServer):
    """NeMo Gym's ``BaseServer``: a pydantic model holding its ``config``."""

    def setup_liveness(self, app: FastAPI) -> None:
        async def liveness() -> dict[str, str]:
            return {"status": "ok"}

        for path in ("/", "/health", "/healthz", "/livez", "/readyz"):
            app.get(path, include_in_schema=False)(liveness)


#: The logical CPUs a local Ray started for an environment announces (Ray's default: the machine's cores).
RAY_NUM_CPUS_ENV = "NGYM_RAY_NUM_CPUS"


def local_ray_options() -> dict[str, Any]:
    """``ray.init`` options of a local Ray started before serving: ``num_cpus`` from ``NGYM_RAY_NUM_CPUS``.

    Ray runs as many one-CPU tasks at once as it announces CPUs. A task that mostly waits (code_gen's
    ``check_correctness`` starts a ``multiprocessing.Manager`` and a test process and joins them) then leaves
    cores idle while verifies queue: on 2 cores, 8 announced CPUs gave code_gen 1.52x the rollouts/s with the
    same rewards (docs/performance.md). Opt-in: more tasks at once also means each test's wall-clock timeout is
    measured on a busier machine. A cluster (``RAY_ADDRESS``) keeps its own resources."""
    value = os.environ.get(RAY_NUM_CPUS_ENV, "").strip()
    return {"num_cpus": int(value)} if value.isdigit() and int(value) > 0 else {}


class SimpleServer(BaseServer, ngym.SimpleServer):
    """NeMo Gym's ``SimpleServer``: a server that may call others through ``server_client``."""

    server_client: ServerClient = Field(default_factory=ServerClient)
    ray_enabled: ClassVar[bool | None] = None

    def before_serving(self) -> None:
        """Start Ray before serving, as NeMo Gym's ``run_webserver`` does for a server declaring
        ``ray_enabled = True``: otherwise the environment's first ``.remote()`` starts a local Ray from inside a
        request handler, on the event loop, and the whole server answers nothing (``/health`` included) for
        the tens of seconds that takes. The same ``ray.init()`` the first ``.remote()`` would make (the cluster
        at ``RAY_ADDRESS``; else ``ray_head_node_address`` when configured; else a local one), only earlier."""
        super().before_serving()
        if type(self).ray_enabled is not True:  # undeclared (None) stays lazy: most such servers never use Ray
            return
        try:
            import ray
        except ImportError:  # the environment has no Ray to start; its own import would fail the same way
            return
        if ray.is_initialized():
            return
        # RAY_ADDRESS first: a fleet sets it for each environment it places on its cluster, while the global
        # config's ray_head_node_address is the one NeMo Gym's own servers join (possibly another Ray)
        config = maybe_get_global_config_dict()
        address = os.environ.get("RAY_ADDRESS") or (config.get("ray_head_node_address") if config else None)
        ray.init(**({"address": address} if address else local_ray_options()), ignore_reinit_error=True)

    def get_session_middleware_key(self) -> str:
        return f"{type(self).__name__}___{self.config.name}"

    def setup_exception_middleware(self, app: FastAPI) -> None:
        """Exceptions escaping routes become 500 answers with what happened (NeMo Gym adds this when serving)."""
        add_exception_middleware(app, self.get_session_middleware_key())

    def setup_cancellation_middleware(self, app: FastAPI) -> None:
        """Cancel a handler whose client disconnected (NeMo Gym adds this when serving)."""
        app.add_middleware(ClientDisconnectCancellationMiddleware)

    def setup_session_middleware(self, app: FastAPI) -> None:
        """Per-rollout sessions for a hand-built app: ngym's signed-cookie middleware, store and sweeper.

        ``request.session[SESSION_ID_KEY]`` is then the rollout's id, carried by the cookie ngym sets on every
        response, as with NeMo Gym's Starlette ``SessionMiddleware``.
        """
        install_sessions = getattr(self, "install_sessions", None)
        if install_sessions is None:
            raise TypeError(f"{type(self).__name__}: sessions need a resources server (SimpleResourcesServer)")
        install_sessions(app)  # the middleware, store, sweeper, lifespan and /health (once per app)
        # NeMo's setup_webserver adds no exception middleware (run_webserver does, after it): an error raised by
        # the hand-built app's routes reaches the caller of the bare app (a test's TestClient); served, it is a 500.
        raise_server_exceptions(app, True)
