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
import weakref
from typing import Any, ClassVar, Literal

import aiohttp
import orjson
from aiohttp import ClientResponse, ClientResponseError
from fastapi import FastAPI
from ngym_nemo_gym.servers import ServerNotConfigured, ServerTarget, instance_fields, resolve_server
from pydantic import BaseModel, ConfigDict, Field

import ngym
from nemo_gym.global_config import get_first_server_config_dict
from ngym.errors import JudgeError
from ngym.server.middleware import NgymMiddleware

__all__ = [
    "MAX_NUM_TRIES",
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
ROLLOUT_PATH_PREFIX = "ng-rollout"
ServerStatus = Literal["success", "connection_error", "timeout", "unknown_error"]


class ServerCallError(JudgeError):
    """A call to another server failed before any answer (no URL for the name, connection refused, timeout)."""


class ServerResponseError(ClientResponseError, JudgeError):
    """Another server answered with a non-2xx status; ``response_content`` holds its body."""

    response_content: bytes | None = None


# Reported under aiohttp's name, as NeMo Gym's (plain aiohttp) error is: environments and their tests record and
# match the ``ClientResponseError: ...`` text of a failed judge call.
ServerResponseError.__name__ = ServerResponseError.__qualname__ = "ClientResponseError"


# One aiohttp session per event loop: sessions are bound to the loop that made them, and tests run many loops.
_client_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)


def _client_session() -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    session = _client_sessions.get(loop)
    if session is None or session.closed:
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30))
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


async def raise_for_status(response: ClientResponse, content: bytes | None = None) -> None:
    """Raise :class:`ServerResponseError` (with ``response_content``) when the answer is not 2xx.

    The response's own ``raise_for_status`` decides, as in NeMo Gym (so a test's stand-in response works too).
    """
    if response.ok:
        return
    if content is None:
        content = await response.read()
    try:
        response.raise_for_status()
    except ClientResponseError as exc:
        error = ServerResponseError(exc.request_info, exc.history, status=exc.status, message=exc.message)
        error.response_content = content
        raise error from exc


async def get_response_json(response: ClientResponse) -> Any:
    return orjson.loads(await response.read())


def get_server_url(server_name: str) -> str:
    return resolve_server(server_name).base_url


def rollout_path_prefix(rollout_id: str | None, *, token_capture: bool = False) -> str:
    """``/ng-rollout/<id>`` (the tracing prefix servers strip), or ``""`` without an id."""
    if not rollout_id:
        return ""
    prefix = f"/{ROLLOUT_PATH_PREFIX}/{rollout_id}"
    return f"{prefix}/training-token-capture" if token_capture else prefix


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
    global_config_dict: Any = Field(default=None)

    @classmethod
    def load_from_global_config(cls, head_server_config: Any = None) -> ServerClient:
        return cls(head_server_config=head_server_config)

    def _target(self, server_name: str) -> ServerTarget:
        try:
            return resolve_server(server_name)
        except ServerNotConfigured as exc:
            fields = instance_fields(self.global_config_dict or {}, server_name)
            if fields and fields.get("host") and fields.get("port"):
                return ServerTarget(server_name, f"http://{fields['host']}:{fields['port']}")
            raise ServerCallError(str(exc)) from None

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


class SimpleServer(BaseServer, ngym.SimpleServer):
    """NeMo Gym's ``SimpleServer``: a server that may call others through ``server_client``."""

    server_client: ServerClient = Field(default_factory=ServerClient)
    ray_enabled: ClassVar[bool | None] = None

    def get_session_middleware_key(self) -> str:
        return f"{type(self).__name__}___{self.config.name}"

    def setup_session_middleware(self, app: FastAPI) -> None:
        """Per-rollout sessions for a hand-built app: ngym's signed-cookie middleware, store and sweeper.

        ``request.session[SESSION_ID_KEY]`` is then the rollout's id, carried by the cookie ngym sets on every
        response, as with NeMo Gym's Starlette ``SessionMiddleware``.
        """
        make_manager = getattr(self, "_make_session_manager", None)
        if make_manager is None:
            raise TypeError(f"{type(self).__name__}: sessions need a resources server (SimpleResourcesServer)")
        if getattr(app.state, "ngym_session_middleware_installed", False):
            return
        app.state.ngym_session_middleware_installed = True
        self._ngym_sessions = make_manager()
        app.add_middleware(NgymMiddleware, sessions=self._ngym_sessions)
        app.router.lifespan_context = self._lifespan  # starts the idle-session sweeper and the startup hooks
