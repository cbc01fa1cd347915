"""A training client's ORS requests, answered as plain ASGI ahead of the front's router.

A training client's rollout (``openreward``'s session, as TRL's ``OpenRewardSpec`` drives it) is ``/create_session``,
``/create``, a first ``/ping``, ``/prompt``, one ``/call`` per tool call, the final answer's ``/call``, ``/delete``
and ``/delete_session``. Only ``/create`` (the seed) and the ``/call``\\ s run the environment; the other five read
or drop an entry of the episode table. All are answered here, before the front's router: no request object, no
route table, no response object, no body model. The five answer ready-made bytes (a session's prompt and tool
listing are kept per row, see ``rows.RowFacts``) with ready-made headers, so they cost the HTTP server's own work
and a dictionary lookup; ``/create`` and ``/call`` run the same episode code as the router's routes (``/call`` in
this task, with a timer for a call still running after ``sse.PING_SECONDS``: ``sse.answer_inline``). The five are
also answered before any ASGI work, from the HTTP parser's callbacks (``FastRoutes.ready``, given to the server's
protocol through ``ngym.server.pipeline.ready_answers``); the ASGI answers here remain for requests the protocol
does not answer that way (pipelined behind another, ``Connection: close``, the h11 parser, the access log on).
``/create``, ``/call`` and ``/delete`` are run by the protocol from the same callbacks once their body is in
(``FastRoutes.direct``, ``ngym.server.pipeline.direct_answers``): no scope, no request cycle, no ASGI messages
in; a body over the protocol's ``READY_MAX_BODY`` takes uvicorn's request cycle straight to this front
(``FastRoutes.app_for``), past the server app's outer layers, which have nothing to do for them. A case not
answered here (on either path) goes to the whole app, as any request does.

Only the plain case is answered here: the bare route (``/ping``, not ``/<env_name>/ping``), its method, an
``X-Session-ID`` naming a live episode where one is needed, a row without a Gymnasium observation for the prompt,
a body within the server's limit and complete (as uvicorn hands it over), of the plain shape (``/create``:
``{"split", "index"}``; ``/call``: ``{"name", "input"}``). Anything else (a missing or unknown session, ``HEAD``, a
named environment, a body declared too large, ``task_spec``, a resumed call's ``task_id``, a body that is not
JSON) goes to the router, body included, which answers it, errors included.
``tests/unit/test_ors_fast_routes.py`` checks that every answer made here is the router's, byte for byte.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, NamedTuple

import pydantic_core

from ngym.errors import ConfigError
from ngym.server.fronts.ors import sse
from ngym.server.fronts.ors.episodes import FrontError
from ngym.server.fronts.ors.paths import is_ors_root, mounted_route
from ngym.server.fronts.ors.routes import refusal
from ngym.server.pipeline.intake import parse_json
from ngym.server.pipeline.request_limits import BODY_BYTES_KEY

if TYPE_CHECKING:
    from ngym.server.fronts.ors.episodes import Episode
    from ngym.server.fronts.ors.routes import ORSFront

Send = Callable[[Any], Awaitable[None]]
Receive = Callable[[], Awaitable[Any]]
#: What a handler gives back: None when it answered, else the ``receive`` the router reads the body from.
Outcome = Receive | None
#: A 200's headers and body.
Answer = tuple[list[tuple[bytes, bytes]], bytes]

_JSON_TYPE = (b"content-type", b"application/json")
_SSE_HEADERS = [(k.encode(), v.encode()) for k, v in sse.HEADERS.items()]
_SSE_TYPE = (b"content-type", f"{sse.MEDIA_TYPE}; charset=utf-8".encode())
_PING_OK = b'{"status":"ok"}'
_SESSION_HEADER = b"x-session-id"
_CREATE_KEYS = frozenset({"split", "index"})
_CALL_KEYS = frozenset({"name", "input"})


def _length(body: bytes) -> tuple[bytes, bytes]:
    return (b"content-length", b"%d" % len(body))


def _json(body: bytes) -> Answer:
    """A JSON body with the headers Starlette's ``Response(body, media_type="application/json")`` sends."""
    return [_length(body), _JSON_TYPE], body


_PING_ANSWER = _json(_PING_OK)
#: a ready answer's bytes (``FastRoutes.ready``) for the two kinds of answer made here, the body's length and body
#: put in: what joining their header fields writes, without the join
_JSON_READY = b"content-length: %d\r\ncontent-type: application/json\r\n\r\n%s"
_SSE_READY = (
    b"".join(b"%s: %s\r\n" % field for field in _SSE_HEADERS)
    + b"content-length: %d\r\n"
    + b"%s: %s\r\n\r\n" % _SSE_TYPE
    + b"%s"
)


def _plain_object(body: bytes, keys: frozenset[str]) -> dict[str, Any] | None:
    """``body`` as a JSON object with exactly ``keys`` (strict JSON), else None."""
    if not body:
        return None
    try:
        data = parse_json(body)
    except ValueError:
        return None
    return data if type(data) is dict and data.keys() == keys else None


#: How many URLs a front remembers what they are (``FastRoutes._resolve``): its own few, NeMo Gym's wire's routes.
_KNOWN_URLS = 256


class _Route(NamedTuple):
    """What a request's method and URL are to the front (``FastRoutes._resolve``)."""

    at_once: Callable[[str | None], Answer | None] | None
    runner: Callable[[str, bytes, Send], Coroutine[Any, Any, None] | None] | None
    root: bool
    route: str


_NOT_ORS = _Route(None, None, False, "")


def _scan(headers: list[tuple[bytes, bytes]], root: bool, max_body: int) -> tuple[bool, str | None]:
    """One pass over a request's headers (the protocol checked ``content-length`` is digits): whether it is ORS's
    (a root request carries ``X-Session-ID`` or asks for an event stream: ``paths.is_ors_request``) with a body
    within ``max_body``, and its ``X-Session-ID`` (the first, stripped; None when missing or blank)."""
    sid: str | None = None
    seen_sid = False
    ors = not root
    for name, value in headers:
        if name == _SESSION_HEADER:
            ors = True
            if not seen_sid:
                seen_sid = True
                sid = value.decode("latin-1").strip() or None
        elif name == b"content-length":
            if int(value) > max_body:
                return False, None
        elif name == b"accept" and not ors and b"text/event-stream" in value:
            ors = True
    return ors, sid


class _Plain:
    """What one header pass finds: the ``X-Session-ID`` (stripped; None when missing or blank), and whether the
    body is within ``max_body`` (as the request limits would let it through)."""

    __slots__ = ("ok", "sid", "whole")

    def __init__(self, scope: Any, max_body: int) -> None:
        self.sid: str | None = None
        buffered = scope.get(BODY_BYTES_KEY)
        #: the body came whole with the headers, within the limit: one ``receive`` holds all of it
        self.whole = self.ok = buffered is not None and buffered <= max_body
        seen_sid = seen_length = False
        for name, value in scope["headers"]:
            if name == _SESSION_HEADER and not seen_sid:
                seen_sid = True
                self.sid = value.decode("latin-1").strip() or None
            elif name == b"content-length" and not seen_length:
                seen_length = True
                if not self.ok:
                    self.ok = value.isdigit() and int(value) <= max_body
        if not seen_length and buffered is None:
            self.ok = True  # no declared size: the request limits bound only what a route reads


class FastRoutes:
    """The plain cases of ``/create_session``, ``/create``, ``/call``, ``/ping``, ``/prompt``, ``/task_tools``,
    ``/tools``, ``/delete`` and ``/delete_session`` of one front, as ASGI; those that run no environment code also
    as ready bytes for the HTTP protocol (``ready``)."""

    def __init__(self, front: ORSFront) -> None:
        self.front = front
        self.episodes = front.episodes
        self.max_body = front.episodes.server.config.max_request_body_bytes
        #: the requests that run no environment code: the session id (or None) → the answer, or None when the
        #: router must answer (``delete`` of a session still open: closing it runs the environment's close)
        self.at_once: dict[tuple[str, str], Callable[[str | None], Answer | None]] = {
            ("POST", "/create_session"): self.create_session,
            ("POST", "/ping"): self.ping,
            ("GET", "/prompt"): self.prompt,
            ("GET", "/task_tools"): self.task_tools,
            ("GET", "/tools"): self.tools,
            ("POST", "/delete"): self.forget,
            ("POST", "/delete_session"): self.delete_session,
        }
        self._by_bytes = {(method.encode(), route): answer for (method, route), answer in self.at_once.items()}
        handlers: dict[tuple[str, str], Callable[[_Plain, Receive, Send], Awaitable[Outcome]]] = {
            ("POST", "/create"): self.create,
            ("POST", "/call"): self.call,
            ("POST", "/delete"): self.delete,  # closes a session still open (``forget`` is the ready case)
        }
        self.handlers = handlers
        self._direct = frozenset((method.encode(), route) for method, route in handlers)
        self._runners: dict[str, Callable[[str, bytes, Send], Coroutine[Any, Any, None] | None]] = {
            "/create": self._create_runner,
            "/call": self._call_runner,
            "/delete": self._delete_runner,
        }
        self._known: dict[tuple[bytes, bytes], _Route] = {}
        opened = sse.finished_text("\0", "").encode()
        self._opened_head, self._opened_tail = opened.split(b"\0")

    async def __call__(self, route: str, scope: Any, receive: Receive, send: Send) -> Outcome:
        """Answer ``route`` (the path below the mount) when it is a plain case (None); else the ``receive`` the
        router must read the request's body from."""
        key = (scope["method"], route)
        handler = self.handlers.get(key)
        at_once = self.at_once.get(key) if handler is None else None
        if handler is None and at_once is None:
            return receive
        plain = _Plain(scope, self.max_body)
        if not plain.ok:
            return receive
        if handler is not None:
            return await handler(plain, receive, send)
        answer = at_once(plain.sid)  # type: ignore[misc]
        if answer is None:
            return receive
        headers, body = answer
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return None

    def _resolve(self, method: bytes, url: bytes) -> _Route:
        """What ``method`` at ``url`` is to this front: its ready answer (or None), its direct runner (or None),
        whether it is a root request (ORS's only with ``X-Session-ID`` or an event-stream ``accept``), its route;
        remembered for the first ``_KNOWN_URLS`` URLs seen (a request is resolved once per URL, not per request)."""
        key = (method, url)
        found = self._known.get(key)
        if found is not None:
            return found
        found = _NOT_ORS
        if b"?" not in url and b"%" not in url:
            path = url.decode("latin-1")
            route = mounted_route(path)
            root = route is None
            route = path if route is None else route
            at_once = self._by_bytes.get((method, route))
            runner = self._runners.get(route) if (method, route) in self._direct else None
            if at_once is not None or runner is not None:
                found = _Route(at_once, runner, root, route)
        if len(self._known) < _KNOWN_URLS:
            self._known[key] = found
        return found

    def ready(self, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]]) -> bytes | None:
        """The plain cases of the requests that run no environment code as the HTTP protocol writes them
        (``ngym.server.pipeline.ready_answers``): the headers and body after the status line and
        the server's default headers; None for any other request (it goes on to the app as usual)."""
        # the route's answer is looked up before the headers are read: most requests (NeMo Gym's wire, ORS's
        # /create and /call) are declined without a header scan
        found = self._resolve(method, url)
        at_once = found.at_once
        if at_once is None:
            return None
        ors, sid = _scan(headers, found.root, self.max_body)
        if not ors:
            return None
        answer = at_once(sid)
        if answer is None:
            return None
        fields, body = answer
        if fields[-1] is _JSON_TYPE:
            return _JSON_READY % (len(body), body)
        if fields[-1] is _SSE_TYPE:
            return _SSE_READY % (len(body), body)
        return b"".join(b"%s: %s\r\n" % field for field in fields) + b"\r\n" + body

    def direct(self, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]]) -> Any:
        """The runner (``ngym.server.pipeline.direct_answers.Runner``) of an ORS ``/create``, ``/call`` or
        ``/delete`` naming a session, with a body within the server's limit: the HTTP protocol runs it from its
        parser's callbacks once the body is in. None for every other request (the usual path)."""
        found = self._resolve(method, url)
        if found.runner is None:
            return None
        ors, sid = _scan(headers, found.root, self.max_body)
        if not ors or sid is None:
            return None
        return functools.partial(found.runner, sid)

    def _create_runner(self, sid: str, body: bytes, send: Send) -> Coroutine[Any, Any, None] | None:
        data = _plain_object(body, _CREATE_KEYS)
        if data is None or type(data["split"]) is not str or type(data["index"]) is not int:
            return None
        return self._create(sid, data["split"], data["index"], send)

    def _call_runner(self, sid: str, body: bytes, send: Send) -> Coroutine[Any, Any, None] | None:
        episode = self.episodes.find(sid)
        if episode is None:
            return None
        data = _plain_object(body, _CALL_KEYS)
        if data is None or type(data["name"]) is not str or type(data["input"]) is not dict:
            return None
        return self._call(episode, data["name"], data["input"], send)

    def _delete_runner(self, sid: str, body: bytes, send: Send) -> Coroutine[Any, Any, None] | None:
        return self._delete(sid, send)

    def app_for(self, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]], app: Any) -> Any:
        """The ASGI app the HTTP protocol runs an ORS ``/create``, ``/call`` or ``/delete`` with
        (``ngym.server.pipeline.ready_answers``): this front's plain case, taken straight from uvicorn's request
        cycle, past the server app's layers above the front (error page, telemetry, body limit, proxy headers,
        the ORS dispatch), which have nothing to do for it; any other case goes to ``app``, the server's whole
        application, body included, as it would have. None for every other request."""
        found = self._resolve(method, url)
        if found.runner is None or (found.root and not is_ors_root(found.route, headers)):
            return None
        route = found.route
        fast = self

        async def direct(scope: Any, receive: Receive, send: Send) -> None:
            left = await fast(route, scope, receive, send)
            if left is not None:  # not the plain case: the whole application answers it
                await app(scope, left, send)

        return direct

    def _episode(self, sid: str | None) -> Episode | None:
        return self.episodes.find(sid) if sid is not None else None

    async def _object(self, plain: _Plain, receive: Receive, keys: frozenset[str]) -> tuple[Any, Receive]:
        """The body as a JSON object with exactly ``keys`` (None when it is not one), and the ``receive`` that
        gives the router the same body."""
        if not plain.whole:
            return None, receive
        message = await receive()
        body = message.get("body", b"") if message["type"] == "http.request" else b""
        again_given = False

        async def again() -> Any:
            nonlocal again_given
            if not again_given:
                again_given = True
                return message
            return await receive()

        if message["type"] != "http.request" or message.get("more_body"):
            return None, again
        return _plain_object(body, keys), again

    # ---- the requests that run no environment code: answers made at once ----------------------------------

    def create_session(self, sid: str | None) -> Answer:
        body = self._opened_head + self.front.slot.new_id().encode() + self._opened_tail
        return [*_SSE_HEADERS, _length(body), _SSE_TYPE], body

    def ping(self, sid: str | None) -> Answer | None:
        return None if self._episode(sid) is None else _PING_ANSWER

    def prompt(self, sid: str | None) -> Answer | None:
        episode = self._episode(sid)
        return None if episode is None or episode.observation else _json(episode.facts.prompt)

    def task_tools(self, sid: str | None) -> Answer | None:
        episode = self._episode(sid)
        return None if episode is None else _json(episode.facts.listing)

    def tools(self, sid: str | None) -> Answer:
        return _json(self.front.listing)

    def forget(self, sid: str | None) -> Answer | None:
        """``/delete`` of a session that is unknown or closed already (its verify closed it): forgotten."""
        if sid is None or not self.episodes.forget_closed(sid):
            return None
        return _json(pydantic_core.to_json({"sid": sid}))

    def delete_session(self, sid: str | None) -> Answer | None:
        return None if sid is None else _json(pydantic_core.to_json({"sid": sid}))

    # ---- the requests that run environment code --------------------------------------------------------

    async def create(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        if plain.sid is None:
            return receive
        data, receive = await self._object(plain, receive, _CREATE_KEYS)
        if data is None or type(data["split"]) is not str or type(data["index"]) is not int:
            return receive
        await self._create(plain.sid, data["split"], data["index"], send)
        return None

    async def _create(self, sid: str, split: str, index: int, send: Send) -> None:
        try:
            await self.front.open_episode(sid, split, index)
        except (FrontError, ConfigError) as exc:  # as the router answers them
            refused = refusal(exc)
            assert refused is not None
            await send({"type": "http.response.start", "status": refused.status_code, "headers": refused.raw_headers})
            await send({"type": "http.response.body", "body": bytes(refused.body)})
            return
        headers, body = _json(pydantic_core.to_json({"sid": sid}))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def call(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        episode = self._episode(plain.sid)
        if episode is None:
            return receive
        data, receive = await self._object(plain, receive, _CALL_KEYS)
        if data is None or type(data["name"]) is not str or type(data["input"]) is not dict:
            return receive
        await self._call(episode, data["name"], data["input"], send)
        return None

    async def _call(self, episode: Episode, name: str, arguments: dict[str, Any], send: Send) -> None:
        task_id = f"{random.getrandbits(128):032x}"  # within its session: no system call per call for it
        result: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.front.keep_result(episode, task_id, result)
        await sse.answer_inline(task_id, self.front.call_json(episode, name, arguments), result, send)

    async def delete(self, plain: _Plain, receive: Receive, send: Send) -> Outcome:
        """``/delete`` of a session still open: closed (the environment's close), then forgotten."""
        if plain.sid is None:
            return receive
        await self._delete(plain.sid, send)
        return None

    async def _delete(self, sid: str, send: Send) -> None:
        await self.episodes.delete(sid)
        headers, body = _json(pydantic_core.to_json({"sid": sid}))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
