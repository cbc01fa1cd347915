"""uvicorn's HTTP protocol with a header deadline and a header size cap (uvicorn has neither for httptools).

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but only once a response was sent:
a connection that opens and sends nothing, or trickles its headers, stays open for good (200 such
connections were still open hours later). Here each connection must complete a request's headers within
``request_header_timeout_seconds`` of opening, and again of each response; a request whose line and headers
are longer than ``max_request_header_bytes`` is answered 431, whether they are complete or not and however few
socket reads carried them (h11 also caps an incomplete event: what is bounded is how much a client can make the
server buffer). The body is the application's business (``ngym.server.pipeline.request_limits``).

The settings travel on the ``uvicorn.Config`` object (attributes ``ngym_header_timeout`` and
``ngym_max_header_bytes``), because uvicorn builds one protocol per connection from its config, in worker
processes too.

The protocol also puts in the scope the size of a request body that arrived whole with its headers, before the
app runs (``ngym.server.pipeline.request_limits.BODY_BYTES_KEY``): the body limits have nothing left to do for it.

An answer given before its request's body has all arrived (a 413 for a body over a limit, which the app refuses
unread) is followed by a lingering close, as nginx does: the server ends its side (FIN) after the answer, then
reads and drops what the client still sends, for at most ``LINGER_SECONDS`` and ``LINGER_BYTES``
(``lingering_close``), before it closes. Closing at once with unread bytes makes the kernel reset the connection,
and a peer still sending (HAProxy in front of ``--workers N``, relaying the body) then loses the answer it had not
yet read: the client got "server disconnected" instead of the 413 that names the setting.

Each response goes to the socket in one write: its status line and headers are held until its body's first bytes
(or the end of the event loop's turn, whichever comes first) and written with them. uvicorn writes them apart: two
system calls per response, and the peer (HAProxy in front of ``--workers N``, or the client) is woken for each.

A worker only HAProxy reaches (``ngym run --workers N``: a unix socket in the supervisor's private folder) serves
with ``ProxiedHttpToolsProtocol``: the same guards, and no second per-response timer. uvicorn arms a keep-alive
timer after every response (a timer made and cancelled per request); there the connection's one timer, which
already waits for the next request's headers after each response, closes it once it has been idle
``keep_alive_timeout_seconds`` (or the header deadline, if shorter).

A request the application can answer from its method, URL and headers alone, with bytes it has ready (the ORS
front's ``/ping``, ``/prompt``, ``/create_session``, ``/delete``, ``/delete_session``), is answered from the
parser's callbacks (httptools): no ASGI scope, cycle, task or middleware. The application says which by putting
a ``ReadyAnswers`` on its ``state`` (``ngym.server.pipeline.ready_answers``). Requests its ``direct`` names (the
ORS front's ``/create``, ``/call``, ``/delete``) are run from the same callbacks once their body is in, without an
ASGI request cycle (``ngym.server.pipeline.direct_answers``); any other request takes the usual path, or, when its
``app_for`` names one, runs that ASGI app in the request cycle uvicorn makes for it instead of the server's whole
application.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from ngym.server.pipeline import direct_answers
from ngym.server.pipeline.lingering_close import LingeringClose
from ngym.server.pipeline.ready_answers import READY_MAX_BODY, ReadyAnswers
from ngym.server.pipeline.request_limits import BODY_BYTES_KEY, DEFAULT_HEADER_TIMEOUT_SECONDS, DEFAULT_MAX_HEADER_BYTES

log = logging.getLogger("ngym.server")


_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 36\r\n\r\nrequest line and headers are too big"
)


def _find_ready_answers(app: Any) -> ReadyAnswers | None:
    """The ``ReadyAnswers`` of the app uvicorn serves, under its wrappers (proxy headers, message logger)."""
    for _ in range(6):
        state = getattr(app, "state", None)
        found = getattr(state, "ngym_ready_answers", None) if state is not None else None
        if isinstance(found, ReadyAnswers):
            return found
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


_STATUS_200 = b"HTTP/1.1 200 OK\r\n"


class HeaderDeadline:
    """Mixin for uvicorn's protocol classes (``HttpToolsProtocol``, ``H11Protocol``).

    The connection waits for a request's headers from when it opens and after each response (armed), until a
    request starts (the protocol makes a new ``cycle``, whose response is not complete: disarmed). Arming sets a
    deadline; one timer per connection checks it. The timer is made when the connection opens and moved on only
    when it fires before the deadline, so a busy keep-alive connection (a request every few milliseconds) makes
    no timer per request. Arming and disarming run on every request, so they are written out inline rather than
    as helper calls, and hold no reference to a finished request (its objects are freed as soon as uvicorn
    lets go of them).
    """

    #: reached only through HAProxy: no keep-alive timer per response (the connection's one timer closes it idle)
    proxied = False

    cycle: Any
    config: Any
    server_state: Any
    parser: Any
    headers: list[tuple[bytes, bytes]]
    url: bytes
    app: Any
    expect_100_continue: bool
    timeout_keep_alive: int
    timeout_keep_alive_task: asyncio.TimerHandle | None
    timeout_keep_alive_handler: Callable[[], None]
    pipeline: Any
    flow: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: Any

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # BaseTransport, as asyncio.BaseProtocol declares it, so the mixin fits both bases; the mixin's own
        # base is object, hence the ignore on the cooperative call into uvicorn's protocol.
        super().connection_made(transport)  # type: ignore[misc]
        # the request cycles write to (and close) this wrapper; flow control keeps the raw transport
        self.transport = LingeringClose(transport, self)  # type: ignore[assignment]
        self._ngym_lingering = False
        self._ngym_in_message = False  # httptools: between a request's first byte and its body's last
        self._ngym_body_wait = False  # answered before its body came: armed again once that body is in
        self._ngym_timer: asyncio.TimerHandle | None = None
        self._ngym_seconds = getattr(self.config, "ngym_header_timeout", DEFAULT_HEADER_TIMEOUT_SECONDS)
        if self.proxied:  # the one timer is also the idle close (no keep-alive timer per response)
            self._ngym_seconds = min(self._ngym_seconds, self.timeout_keep_alive)
        self._ngym_max_bytes = getattr(self.config, "ngym_max_header_bytes", DEFAULT_MAX_HEADER_BYTES)
        self._ngym_ready: ReadyAnswers | None = None
        self._ngym_answer: bytes | None = None  # the ready answer of the request being parsed
        self._ngym_runner: Any = None  # the direct runner of the request being parsed (its body is read here)
        self._ngym_idle_until = 0.0  # answered here: closed if no byte of a next request comes by then
        self._ngym_body = b""
        self._ngym_defaults: Any = None
        self._ngym_head = b""
        if not self.config.access_log:  # the access log lines are written by the request cycle
            self._ngym_ready = _find_ready_answers(getattr(self, "app", None))
        self._arm()

    def _arm(self) -> None:
        self._ngym_header_bytes = 0
        self._ngym_tail = b""
        self._ngym_deadline = self.loop.time() + self._ngym_seconds
        self._ngym_armed = True
        if self._ngym_timer is None:
            self._ngym_timer = self.loop.call_at(self._ngym_deadline, self._header_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._ngym_lingering:  # the rest of a body that was answered unread: dropped
            self.transport.dropped(len(data))  # type: ignore[attr-defined]
            return
        if not self._ngym_armed:  # a request's body, or a pipelined request behind one in progress
            super().data_received(data)  # type: ignore[misc]
            if self._ngym_body_wait and not self._body_pending():
                self._ngym_body_wait = False
                self._rearm()
            return
        before = self._ngym_header_bytes
        self._ngym_header_bytes += len(data)
        if self._ngym_header_bytes > self._ngym_max_bytes:
            # Over the cap so far: measure where the header block ends before the parser sees it. Checking only
            # while the headers were incomplete let a block that completes within one or two socket reads
            # through at any size (100,000 bytes served with a 65,536 cap).
            tail = self._ngym_tail
            end = _header_block_end(tail + data, skip_blank_lines=before == 0)
            size = before - len(tail) + end if end >= 0 else self._ngym_header_bytes
            if size > self._ngym_max_bytes:
                self._too_large(size)
                return
        self._ngym_tail = data[-2:]
        super().data_received(data)  # type: ignore[misc]
        if not self._ngym_armed:
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:  # a request started: its headers are complete
            self._ngym_armed = False  # the timer stays: it finds nothing to do, or the next deadline to wait for
            if not cycle.more_body:
                # Its whole body came with its headers, and its app has not run yet (it starts after this call),
                # so all of the body is still in the cycle: nothing is left for the body limits to bound.
                cycle.scope[BODY_BYTES_KEY] = len(cycle.body)

    def _too_large(self, size: int) -> None:
        self._ngym_armed = False
        log.info("%s: request headers over %d bytes; answered 431", _peer(self.client), size)
        if not self.transport.is_closing():
            self.transport.write_whole(_TOO_LARGE)  # type: ignore[attr-defined]
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if self._body_pending():  # answered before its body came: what comes next is that body, not headers
            self._ngym_armed, self._ngym_body_wait = False, True
            return
        self._rearm()

    def _body_pending(self) -> bool:
        """The current request's body is still arriving (its answer may already be sent)."""
        conn = getattr(self, "conn", None)  # h11's connection state (its states are named classes); httptools has none
        if conn is not None:
            return bool(getattr(conn.their_state, "__name__", "") == "SEND_BODY")
        return self._ngym_in_message

    def on_message_begin(self) -> None:  # httptools' parser callback (h11 has none)
        self._ngym_in_message = True
        super().on_message_begin()  # type: ignore[misc]

    def on_message_complete(self) -> None:  # httptools' parser callback
        self._ngym_in_message = False
        answer = self._ngym_answer
        if answer is not None:
            self._ngym_answer = None
            self._answer_ready(answer)
            return
        runner = self._ngym_runner
        if runner is not None:
            self._ngym_runner = None
            body, self._ngym_body = self._ngym_body, b""
            self._run_direct(runner, body)
            return
        super().on_message_complete()  # type: ignore[misc]

    def _run_direct(self, runner: direct_answers.Runner, body: bytes) -> None:
        """Run a request ``ReadyAnswers.direct`` took, its body in: its coroutine, or the usual path when the
        runner declines it (its request cycle made now, given the body read so far)."""
        if self.transport.is_closing():  # the client went away (or a close is under way): nothing to answer
            return
        reply = direct_answers.DirectReply(self)
        work = runner(body, reply)
        if work is None:
            super().on_headers_complete()  # type: ignore[misc]
            if body:
                super().on_body(body)  # type: ignore[misc]
            super().on_message_complete()  # type: ignore[misc]
            return
        self.cycle = reply
        direct_answers.start(reply, work, self.url.decode("latin-1"), self)

    def response_head(self, status: int) -> bytes:
        """A response's status line and the server's default headers (its date and server headers)."""
        state = self.server_state
        defaults = state.default_headers
        if defaults is not self._ngym_defaults:  # uvicorn renews the list (its date header) once a second
            self._ngym_defaults = defaults
            self._ngym_head = _STATUS_200 + b"".join(b"%s: %s\r\n" % pair for pair in defaults)
        if status == 200:
            return self._ngym_head
        return direct_answers.status_line(status) + self._ngym_head[len(_STATUS_200) :]

    def on_headers_complete(self) -> None:  # httptools' parser callback
        ready = self._ngym_ready
        if ready is not None and ready.answer is not None and self._idle() and not self.expect_100_continue:
            parser = self.parser
            if parser.should_keep_alive() and not parser.should_upgrade() and parser.get_http_version() == "1.1":
                headers = self.headers
                small = _body_is_small(headers)
                if small:
                    answer = ready.answer(parser.get_method(), self.url, headers)
                    if answer is not None:
                        self._ngym_answer = answer
                        return
                if small and ready.direct is not None:  # (what ``app_for`` routes, ``direct`` runs when small)
                    runner = ready.direct(parser.get_method(), self.url, headers)
                    if runner is not None:  # run once its body is in (``on_message_complete``)
                        self._ngym_runner = runner
                        return
                elif ready.app_for is not None:
                    app = ready.app_for(parser.get_method(), self.url, headers, self.app)
                    if app is not None:  # this request runs ``app`` in the cycle uvicorn makes for it
                        served = self.app
                        self.app = app
                        try:
                            super().on_headers_complete()  # type: ignore[misc]
                        finally:
                            self.app = served
                        return
        super().on_headers_complete()  # type: ignore[misc]

    def on_body(self, body: bytes) -> None:  # httptools' parser callback
        if self._ngym_runner is not None:  # a direct request's body (at most READY_MAX_BODY bytes): kept for it
            self._ngym_body += body
        elif self._ngym_answer is None:  # a ready answer's body (at most READY_MAX_BODY bytes) is dropped
            super().on_body(body)  # type: ignore[misc]

    def _answer_ready(self, answer: bytes) -> None:
        """Write a ready answer, then what uvicorn does when a response is complete (count it, the keep-alive
        timer) and wait for the next request's headers."""
        if self.transport.is_closing():  # the client went away (or a close is under way): nothing to answer
            return
        self.transport.write_whole(self.response_head(200) + answer)  # type: ignore[attr-defined]
        self.server_state.total_requests += 1
        self._rearm()
        if not self.proxied:
            self._close_when_idle()

    def direct_complete(self) -> None:
        """A request run from the parser (``direct_answers``) is answered: what uvicorn does when a response is
        complete (count it, resume reading, start a pipelined request), its keep-alive timer aside
        (``_close_when_idle``)."""
        if self.proxied or self.pipeline:  # (a pipelined request starts next: uvicorn's own path)
            self.on_response_complete()
            return
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()  # type: ignore[attr-defined]
        self.flow.resume_reading()
        if self._body_pending():  # a next request's headers are arriving: their deadline holds, not idleness
            self._ngym_armed, self._ngym_body_wait = False, True
            return
        self._rearm()
        self._close_when_idle()

    def _close_when_idle(self) -> None:
        """After an answer given from the parser: the connection closes if no byte of a next request comes within
        uvicorn's keep-alive time, as uvicorn's keep-alive timer would close it, but by the connection's one timer
        (``_header_timed_out``), moved only when it would fire later than that: no timer made and cancelled per
        answer."""
        if not self._ngym_armed:
            return
        until = self.loop.time() + self.timeout_keep_alive
        self._ngym_idle_until = until
        timer = self._ngym_timer
        if timer is None or timer.when() > until:
            if timer is not None:
                timer.cancel()
            self._ngym_timer = self.loop.call_at(until, self._header_timed_out)

    def _rearm(self) -> None:
        cycle = self.cycle
        # Armed again unless closing or a pipelined request is starting (its headers are in).
        self._ngym_idle_until = 0.0
        if (cycle is None or cycle.response_complete) and not self.transport.is_closing():
            self._ngym_header_bytes = 0
            self._ngym_tail = b""
            self._ngym_deadline = self.loop.time() + self._ngym_seconds
            self._ngym_armed = True
            if self._ngym_timer is None:
                self._ngym_timer = self.loop.call_at(self._ngym_deadline, self._header_timed_out)
        else:
            self._ngym_armed = False

    def _idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def handle_websocket_upgrade(self, *args: Any) -> None:
        """The connection becomes a WebSocket (OpenEnv's ``/openenv/ws``): no HTTP request's headers are waited
        for on it any more, so its header deadline is dropped. Kept armed, the deadline closed every WebSocket
        ``request_header_timeout_seconds`` after it opened, however busy (an OpenEnv episode longer than 30 s lost
        its connection mid-episode)."""
        self._ngym_armed = False
        if self._ngym_timer is not None:
            self._ngym_timer.cancel()
            self._ngym_timer = None
        wrapper = self.transport
        if isinstance(wrapper, LingeringClose):  # its jobs (a held head, a lingering close) are HTTP's only:
            wrapper.flush()  # the WebSocket writes to the socket's own transport, no wrapper call per frame
            self.transport = wrapper.raw
        super().handle_websocket_upgrade(*args)  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._ngym_armed = False
        if isinstance(self.transport, LingeringClose):
            self.transport.lost()
        if self._ngym_timer is not None:
            self._ngym_timer.cancel()
            self._ngym_timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _header_timed_out(self) -> None:
        self._ngym_timer = None
        if not self._ngym_armed:
            return  # a request is in progress: the next response arms again (and makes the timer)
        now, due = self.loop.time(), self._ngym_deadline
        if self._ngym_idle_until and not self._ngym_header_bytes:  # answered here, no byte of a next request since
            if now >= self._ngym_idle_until:
                if self._idle() and not self.transport.is_closing():
                    self.transport.close()  # idle for the keep-alive time: closed quietly, as uvicorn closes it
                return
            due = min(due, self._ngym_idle_until)
        if now < due:  # armed again since this timer was set: wait for that deadline
            self._ngym_timer = self.loop.call_at(due, self._header_timed_out)
            return
        if not self._idle() or self.transport.is_closing():
            return  # a request is in progress
        if not self.proxied or self._ngym_header_bytes:  # behind HAProxy, an idle connection closes quietly
            log.info("%s: no complete request headers in time; connection closed", _peer(self.client))
        self.transport.close()


def _header_block_end(data: bytes, *, skip_blank_lines: bool = False) -> int:
    """The offset just past the blank line that ends a header block in ``data``, or -1 if it holds none. Both
    parsers accept a bare LF as a line end, so ``\\n\\n`` and ``\\n\\r\\n`` both end one (``\\r\\n\\r\\n`` holds the
    latter). ``skip_blank_lines``: ``data`` starts a request, whose leading empty lines end nothing."""
    start = len(data) - len(data.lstrip(b"\r\n")) if skip_blank_lines else 0
    ends = [i + len(blank) for blank in (b"\n\r\n", b"\n\n") if (i := data.find(blank, start)) >= 0]
    return min(ends, default=-1)


def _body_is_small(headers: list[tuple[bytes, bytes]]) -> bool:
    """No chunked body, and a declared one (if any) of at most ``READY_MAX_BODY`` bytes."""
    for name, value in headers:
        if name == b"content-length":
            if not value.isdigit() or int(value) > READY_MAX_BODY:
                return False
        elif name == b"transfer-encoding":
            return False
    return True


def _peer(client: Any) -> str:
    return f"{client[0]}:{client[1]}" if client else "client"


def configure(config: Any, *, header_timeout: float, max_header_bytes: int) -> None:
    """Put the header limits on a ``uvicorn.Config`` (read by each connection's protocol)."""
    config.ngym_header_timeout = header_timeout
    config.ngym_max_header_bytes = max_header_bytes


class GuardedH11Protocol(HeaderDeadline, H11Protocol):
    """h11 with a header deadline and size cap (h11 also caps an incomplete event's size itself)."""


GuardedHttpToolsProtocol: type[asyncio.Protocol] | None
try:  # httptools_impl imports httptools, an optional uvicorn dependency (uvicorn[standard] brings it)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class _GuardedHttpToolsProtocol(HeaderDeadline, HttpToolsProtocol):
        """httptools with a header deadline and size cap."""

    GuardedHttpToolsProtocol = _GuardedHttpToolsProtocol
except ImportError:  # pragma: no cover
    GuardedHttpToolsProtocol = None


ProxiedHttpToolsProtocol: type[asyncio.Protocol] | None = None
if GuardedHttpToolsProtocol is not None:

    class _ProxiedHttpToolsProtocol(_GuardedHttpToolsProtocol):
        """httptools with a header deadline and size cap, for a worker only HAProxy reaches: no keep-alive timer
        made and cancelled per request (the connection's one timer closes it once idle)."""

        proxied = True

        def on_response_complete(self) -> None:
            if self.pipeline:  # a pipelined request starts next: uvicorn's own path, which arms no timer then
                super().on_response_complete()
                return
            # uvicorn's (httptools_impl) when nothing is pipelined, less the keep-alive timer it arms there
            self.server_state.total_requests += 1
            if self.transport.is_closing():
                return
            self._unset_keepalive_if_required()  # uvicorn's --limit-max-requests: the last request closes
            self.flow.resume_reading()
            if self._body_pending():  # answered before its body came: what comes next is that body, not headers
                self._ngym_armed, self._ngym_body_wait = False, True
                return
            self._rearm()

    ProxiedHttpToolsProtocol = _ProxiedHttpToolsProtocol


def protocol_class(*, proxied: bool = False) -> type[asyncio.Protocol]:
    """uvicorn's default protocol (httptools when installed, else h11) with ``HeaderDeadline``; ``proxied``: for a
    worker only HAProxy reaches (``ProxiedHttpToolsProtocol``, when httptools is installed)."""
    if proxied and ProxiedHttpToolsProtocol is not None:
        return ProxiedHttpToolsProtocol
    return GuardedHttpToolsProtocol or GuardedH11Protocol
