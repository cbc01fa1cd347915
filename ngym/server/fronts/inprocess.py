"""Run the environment's own routes in process, inside a rollout's session: the one dispatcher of every front.

The MCP, ORS and OpenEnv fronts reach the session manager and the author's methods the same way: ``POST
/seed_session``, a tool route, ``/verify`` and ``/close_session`` run as one ASGI call to the server's own app, with
the session's cookie, exactly as an agent's HTTP call would: through every middleware the app added (sessions,
request limits, per-session budgets, lost-session masking), its exception handlers, validation and routes. Skipped:
the socket, an HTTP client (``httpx.ASGITransport`` costs several times a small tool route), and the outermost
layers the front's own request has just passed (Starlette's error page, FastAPI's telemetry and body limit, the
ORS dispatch). Nothing about sessions or rewards is decided here.

- ``post(app, path, body, cookie)``: one request; its ``Answer`` (status, body, ``set-cookie`` values);
- ``RolloutSession``: one rollout's cookie, taken from the seed's answer and sent with every later call.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pydantic_core
from starlette.types import ASGIApp, Message

from ngym.server.pipeline.request_limits import BODY_BYTES_KEY
from ngym.server.pipeline.routes import verify_echo_left_out

_HOST = b"ngym-front.internal"
_SERVER = ("ngym-front.internal", 80)
_CLIENT = ("127.0.0.1", 0)
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_JSON = (b"content-type", b"application/json")
#: The outermost layers of a built app that an in-process call skips (see the module docstring), by class name.
_OUTER_LAYERS = frozenset(
    {"ServerErrorMiddleware", "ExceptionTelemetryMiddleware", "AppBodyLimitMiddleware", "ORSRequests"}
)


@dataclass
class Answer:
    """The status, ``set-cookie`` header values and body of one in-process response."""

    status: int = 500
    set_cookies: list[bytes] = field(default_factory=list)
    body: bytes = b""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body parsed (None when empty); ``ValueError`` when it is not JSON."""
        return pydantic_core.from_json(self.body) if self.body else None

    def cookie(self, name: bytes) -> bytes | None:
        """The ``name=value`` pair of the cookie ``name`` this answer sets (its attributes dropped), or None."""
        prefix = name + b"="
        for header in self.set_cookies:
            pair = header.split(b";", 1)[0].strip()
            if pair.startswith(prefix):
                return pair
        return None


def encode(body: Any) -> bytes:
    """A JSON body as bytes (already-encoded bytes pass as they are); a C serialiser: rows are kilobytes."""
    return body if isinstance(body, bytes) else pydantic_core.to_json(body)


def with_field(encoded: bytes, key: str, value: Any) -> bytes:
    """The JSON object ``encoded`` (bytes of a non-empty object without ``key``) with ``key: value`` added last,
    without decoding it: a rollout's ``/verify`` body is its seed row (encoded once) plus its trajectory."""
    return with_raw(encoded, key, pydantic_core.to_json(value))


def with_raw(encoded: bytes, key: str, raw: bytes) -> bytes:
    """The JSON object ``encoded`` (bytes of an object without ``key``, as ``pydantic_core.to_json`` writes it)
    with ``key`` added last, its value the JSON ``raw`` (already encoded): what ``to_json`` writes for the object
    with that key added, byte for byte. A row's tools (kilobytes, the same for every rollout of the row) are encoded
    once this way rather than in every answer and verify body that carries them."""
    head = encoded[:-1] if encoded != b"{}" else b"{"
    separator = b"," if len(head) > 1 else b""
    return head + separator + pydantic_core.to_json(key) + b":" + raw + b"}"


#: The last field of the Responses objects a front builds (after ``tools``).
_COMPLETED = b'"completed"'


def response_json(response: dict[str, Any], tools: bytes) -> bytes:
    """A Responses object a front built, encoded: ``response`` (without ``tools`` and ``status``) with ``"tools"``
    the row's tools as encoded once (``tools``) and ``"status": "completed"`` last, the bytes ``to_json`` writes
    for the whole object."""
    return with_raw(with_raw(pydantic_core.to_json(response), "tools", tools), "status", _COMPLETED)


async def post(app: ASGIApp, path: str, body: Any, cookie: bytes | None = None) -> Answer:
    """``POST path`` with the JSON ``body`` (bytes, or a value to encode) and the session ``cookie``
    (``name=value``) through the whole ``app``; its answer. An exception the app's own error handling let out
    is a 500 naming it."""
    payload = encode(body)
    headers = [(b"host", _HOST), _JSON, (b"content-length", b"%d" % len(payload))]
    if cookie is not None:
        headers.append((b"cookie", cookie))
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": _ASGI,
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": _CLIENT,
        "server": _SERVER,
        "state": {},
        # the whole body is in hand: the request limits check its size and wait for nothing (as for a body the
        # HTTP server read whole)
        BODY_BYTES_KEY: len(payload),
    }
    sent = False
    answer = Answer()
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await asyncio.Event().wait()  # the caller never goes away: a streaming route runs to its end
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer.status = int(message["status"])
            answer.set_cookies = [v for k, v in message.get("headers", ()) if k.lower() == b"set-cookie"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    try:
        await _entry(app)(scope, receive, send)
    except Exception as exc:  # the app's own 500 handling answered already when it could
        if not chunks and answer.status == 500:
            chunks.append(json.dumps({"detail": f"{type(exc).__name__}: {exc}"}).encode())
    answer.body = b"".join(chunks)
    return answer


#: A built middleware stack's entry (``_entry``), kept for the stack it was found in: (stack, entry).
_ENTRIES: dict[int, tuple[Any, ASGIApp]] = {}


def _entry(app: ASGIApp) -> ASGIApp:
    """Where an in-process call enters ``app``: below its outermost layers once its middleware stack is built
    (found once per stack: a front makes a few in-process calls per episode)."""
    stack: Any = getattr(app, "middleware_stack", None)
    if stack is not None:
        known = _ENTRIES.get(id(app))
        if known is not None and known[0] is stack:
            return known[1]
    layer: Any = stack or app
    while type(layer).__name__ in _OUTER_LAYERS and getattr(layer, "app", None) is not None:
        layer = layer.app
    entry: ASGIApp = layer
    if stack is not None:
        if len(_ENTRIES) >= 64:  # apps built and dropped (tests build many): the oldest let go
            del _ENTRIES[next(iter(_ENTRIES))]
        _ENTRIES[id(app)] = (stack, entry)
    return entry


class RolloutSession:
    """One rollout's session on ``app``: seeded in process, its cookie carried by every later call.

    ``cookie_name`` is the server's session cookie (``server.sessions.signer.cookie_name``). A session that exists
    already (an MCP token names it) starts from its signed cookie value (``cookie=``).
    """

    __slots__ = ("app", "cookie", "name")

    def __init__(self, app: ASGIApp, cookie_name: str, cookie: str | None = None) -> None:
        self.app = app
        self.name = cookie_name.encode()
        self.cookie: bytes | None = self.name + b"=" + cookie.encode() if cookie else None

    @property
    def live(self) -> bool:
        """Whether a session is held (seeded and not yet closed)."""
        return self.cookie is not None

    async def post(self, path: str, body: Any) -> Answer:
        """``POST path`` in this session; a cookie the answer sets (a seed's, a switch) becomes the session's."""
        answer = await post(self.app, path, body, self.cookie)
        if answer.set_cookies:
            given = answer.cookie(self.name)
            if given is not None:
                self.cookie = given if given != self.name + b"=" else None
        return answer

    async def seed(self, row: Any) -> Answer:
        """``/seed_session`` with the row: a new session (the server closes the one held, if any)."""
        return await self.post("/seed_session", row)

    async def call(self, tool: str, arguments: Any) -> Answer:
        """The tool route ``/<tool>`` with its arguments (a JSON object)."""
        return await self.post(f"/{tool}", arguments)

    async def verify(self, body: Any, *, echo: bool = True) -> Answer:
        """``/verify`` with the row and the rollout's Responses trajectory. ``echo=False``: the caller reads only
        what verify adds (reward, outcome fields): when the environment's verify answers its declared model, the
        answer leaves out the row parameters and trajectory it would echo (``VERIFY_ECHO``); any other answer
        comes whole."""
        if echo:
            return await self.post("/verify", body)
        token = verify_echo_left_out.set(True)
        try:
            return await self.post("/verify", body)
        finally:
            verify_echo_left_out.reset(token)

    async def close(self) -> Answer | None:
        """``/close_session`` when a session is held (None when none is); the session is let go either way."""
        if self.cookie is None:
            return None
        answer = await post(self.app, "/close_session", b"{}", self.cookie)
        self.cookie = None
        return answer

    def forget(self) -> None:
        """Let the session go without a request (the server closed it itself, after verify)."""
        self.cookie = None


__all__ = ["Answer", "RolloutSession", "encode", "post", "response_json", "with_field", "with_raw"]
