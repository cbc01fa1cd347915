"""HAProxy as the session-affine front of ``ngym run --workers N`` (environments whose state stays in the process).

Routing is stateless: every request goes to the worker its own bytes name, and HAProxy learns nothing from
answers. Each worker is slot I of N (``ngym.server.sessions.routing``); a session id belongs to slot
``crc32(id) mod N``. The key HAProxy hashes is, by precedence: the typed body's ``resources_session_id`` on
``/seed_session`` and ``/close_session`` (NeMo Gym 0.7's caller-chosen id); else the id inside the signed session
cookie (the value before its last ``.``; a seed draws its id so that it hashes to the seeding worker); else the
``/ng-rollout/<id>/`` prefix. A request with none of these (a plain seed) goes to the worker with the fewest
connections. Two session cookies in one request are refused here with 400 (the worker refuses them too), so the
proxy and the server can never read different sessions from one request.

No table is filled from answers, so no volume or shape of traffic can evict or move a live session's route, and
an answer never re-pins one. A request whose key names a slot goes to that slot's worker even while HAProxy counts
it down (``option persist``): a paused or slow worker (``kill -STOP``, a long GC, a swapped-out process) still
holds its sessions, so their requests wait for it (bounded by the server timeout) as they would with one worker;
sending them elsewhere had them answered 410 while the session lived on, and the rollout's verify was later scored
unmasked on a state missing that call. Only when the connection to the worker cannot be made (it is dead: its
socket refuses) is the request sent to another worker (``option redispatch``), which does not hold the session
and says so (a tool call 410, a verify masked ``session_lost``, a typed seed or close 503). A request with no key
(a seed) goes only to a worker counted up. A worker that restarted lost its sessions: their requests reach it and
are answered as lost there. A request is retried only when the connection could not be made (it was never sent),
so no tool call or verify ever runs twice.

Why HAProxy (Debian's ``haproxy`` package): it reads a cookie, a path segment and a JSON field of the body and
hashes them with converters in its configuration (``req.cook``, ``field``, ``json_query``, ``crc32``, ``mod``),
checks health and answers 503 at once when no worker is left.

What it costs: about a fifth of what the counter example's worker takes per request
(``bench/bench_workers.py``). A profile of HAProxy under load (``perf``) puts two thirds of it in the kernel
(reading the client's request and writing the answer back over TCP, the hop to the worker, being woken per
request) and under 3 % in the routing rules below; dropping rules, ``field`` for ``regsub``, no response header
or no body buffering measured no difference (``bench/bench_haproxy_floor.py``: a bare relay with no rule costs
nearly what this configuration does). So the hop to a local worker is a unix socket (``Backend.unix_socket``;
cheaper for HAProxy and the worker than loopback TCP), HAProxy runs in the batch scheduling class (``haproxy_batch``:
woken, it does not preempt a worker, and relays what came in meanwhile in one go: about 30 % less of its CPU per
rollout), keeps its buffers in its own pools (``haproxy_command``), logs no traffic (a line per request formatted
for nothing), can run below the workers' priority (``NGYM_HAPROXY_NICE``), and the rules stay written for what
they route.

The ORS front's sessions are routed the same way: the front makes each ORS session id on the worker that answers
``/create_session``, drawn to hash to that worker's slot, and every later request carries it in ``X-Session-ID``.
So are the OpenEnv front's episodes held between HTTP requests: their id (drawn the same way) comes back in the
episode cookie, a WebSocket's ``?session_id=`` or an MCP call's ``params.session_id``. No table is kept for
anything.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from ngym.errors import ConfigError
from ngym.server.hosting.client_limits import ClientLimits, haproxy_time
from ngym.server.sessions.routing import OPENENV_EPISODE_COOKIE, ORS_MOUNT_PATH, ORS_ROOT_SEGMENTS

HAPROXY_INSTALL_HINT = "apt-get install haproxy (Debian/Ubuntu) or dnf install haproxy"
#: The HAProxy executable to use instead of the one on ``PATH``.
HAPROXY_ENV = "NGYM_HAPROXY"
#: Where every app serves OpenEnv's protocol (``ngym.server.fronts.openenv.MOUNT_PATH``).
OPENENV_PATH = "/openenv"


def haproxy_binary() -> str:
    """The ``haproxy`` executable: ``NGYM_HAPROXY`` when set, else from ``PATH`` (``ConfigError`` naming how to
    install it when it is missing)."""
    chosen = os.environ.get(HAPROXY_ENV)
    found = shutil.which(chosen) if chosen else shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
    if found is None:
        where = f" ({HAPROXY_ENV}={chosen} is not an executable)" if chosen else ""
        raise ConfigError(
            "--workers N for an environment whose sessions stay in the process routes each rollout to its worker "
            f"through HAProxy, which is not installed{where}: {HAPROXY_INSTALL_HINT} (or keep sessions in Redis: "
            "NGYM_SESSION_STORE=redis://...)"
        )
    return found


def haproxy_version(binary: str) -> tuple[int, int]:
    """HAProxy's major and minor version (``haproxy -v``); (0, 0) when it cannot be read."""
    try:
        out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return (0, 0)
    found = re.search(r"version (\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def haproxy_command(binary: str, config_path: str) -> list[str]:
    """How ngym starts HAProxy with the configuration at ``config_path`` (in the foreground).

    From HAProxy 2.6 on, with its process-wide pool cache (``-dMglobal``): freed buffers go back to HAProxy's own
    pools, whose size follows the load, rather than to the C library. Its buffers are sized from the workers'
    header limit (``proxy_bufsize``: 67,584 bytes by default), and more of them than its threads' small caches
    hold were freed and allocated again per request, the heap shrinking and growing with them (``brk`` and fresh
    pages per request; ``bench/bench_haproxy_floor.py --variant dm-global``)."""
    pools = ["-dMglobal"] if haproxy_version(binary) >= (2, 6) else []
    return [binary, "-db", *pools, "-f", config_path]


@dataclass(frozen=True)
class Backend:
    """One worker HAProxy sends requests to: at ``host:port``, or on the unix socket ``unix_socket``."""

    name: str
    host: str = ""
    port: int = 0
    #: a slot whose process never came up (a Ray replica that was not placed): kept so the slots stay numbered
    disabled: bool = False
    #: a worker on this machine: the path of its listening unix socket (``host`` and ``port`` then unused)
    unix_socket: str | None = None

    @property
    def address(self) -> str:
        """The address as HAProxy's ``server`` line takes it (a path in single quotes: HAProxy reads nothing in
        them, not spaces, ``#`` or ``$``; a path holding a single quote is refused)."""
        if self.unix_socket is not None:
            if "'" in self.unix_socket or "\n" in self.unix_socket:
                raise ValueError(f"a unix socket path HAProxy's configuration cannot quote: {self.unix_socket!r}")
            return f"'unix@{self.unix_socket}'"
        return f"{self.host}:{self.port}"


#: How many nice levels below the supervisor ``ngym run --workers N`` starts HAProxy (0: at the supervisor's level).
HAPROXY_NICE_ENV = "NGYM_HAPROXY_NICE"
#: HAProxy's default: the workers' level. Below them (``NGYM_HAPROXY_NICE=10``) HAProxy runs when a worker yields
#: the core and relays what came in meanwhile in one wake-up: less HAProxy CPU per request when other processes keep
#: the cores busy, but on an otherwise idle machine the cores then sit idle between wake-ups and ``--workers 2``
#: served fewer rollouts per second and per CPU-second (docs/performance.md, ``bench/bench_workers.py`` with and
#: without the variable). The workers cannot starve it: they get requests only through HAProxy.
DEFAULT_HAPROXY_NICE = 0


def haproxy_nice() -> int:
    """The nice levels HAProxy runs below the supervisor (``NGYM_HAPROXY_NICE``, 0-19; default
    ``DEFAULT_HAPROXY_NICE``); ``ConfigError`` naming the variable when it is not such a number."""
    text = os.environ.get(HAPROXY_NICE_ENV, "").strip()
    if not text:
        return DEFAULT_HAPROXY_NICE
    if not text.isdigit() or int(text) > 19:
        raise ConfigError(f"{HAPROXY_NICE_ENV}={text!r}: expected a number of nice levels from 0 to 19 (e.g. 10)")
    return int(text)


def lower_priority(levels: int) -> None:
    """In HAProxy's process before exec: run ``levels`` nice levels below the parent (no privilege needed)."""
    if levels:
        with contextlib.suppress(OSError):
            os.nice(levels)


#: ``0`` keeps HAProxy in the normal scheduling class instead of the batch one (``haproxy_batch``).
HAPROXY_BATCH_ENV = "NGYM_HAPROXY_BATCH"


def haproxy_batch() -> bool:
    """Whether ``ngym run --workers N`` starts HAProxy in Linux's batch scheduling class (``SCHED_BATCH``, at its
    nice level): ``NGYM_HAPROXY_BATCH``, ``1`` (the default) or ``0``; ``ConfigError`` naming it otherwise.

    Woken by a request or a worker's answer, HAProxy in the batch class does not preempt the worker running on that
    core: it runs when a core is free or the worker waits for its next request, and relays what came in meanwhile
    in one go. It keeps its fair share of the cores (unlike a lower nice level, which left the cores waiting for
    its wake-ups on an idle machine): on 2 cores HAProxy took about 30 % less CPU per rollout at ``--workers 2``,
    the workers a little less too, and more rollouts per second were served (``bench/bench_workers.py``,
    docs/performance.md), for a latency that can grow by up to a scheduler slice (a few milliseconds) when every
    core is busy."""
    text = os.environ.get(HAPROXY_BATCH_ENV, "").strip()
    if text in ("", "1"):
        return True
    if text == "0":
        return False
    raise ConfigError(f"{HAPROXY_BATCH_ENV}={text!r}: expected 1 (HAProxy in the batch scheduling class) or 0")


def batch_scheduling() -> None:
    """In HAProxy's process before exec: the batch scheduling class at its nice level (no privilege needed;
    nothing where the platform has no such class)."""
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


#: On ``GET /health`` only: the slot (0..N-1) of the worker that should answer (``ngym status``, per worker).
HEALTH_SLOT_HEADER = "x-ngym-health-slot"

_DUPLICATE_COOKIE_BODY = (
    '{"detail":"this request carries more than one session cookie; send exactly one (the one its seed set)"}'
)

_DUPLICATE_EPISODE_BODY = (
    f'{{"detail":"this request carries more than one {OPENENV_EPISODE_COOKIE} cookie; send exactly one (the one '
    '/reset set)"}'
)


def proxy_bufsize(max_header_bytes: int) -> int:
    """HAProxy's buffer for a set whose workers take request headers up to ``max_header_bytes``: the headers fit
    (less HAProxy's 1,024 bytes kept for rewriting), so the proxy refuses no request its workers would take, and
    the typed seed's ``resources_session_id`` is read in that much of the body. HAProxy's default, 16,384, refused
    headers over about 15 KB that one worker takes (a reset, under load, instead of an answer) and routed a typed
    seed by the least-loaded worker when its id came after 15 KB of ``task_data`` (half of them then 503)."""
    return max(16384, max_header_bytes + 2048)


def proxy_threads(backends: int, cpus: int | None = None) -> int:
    """HAProxy's threads for ``backends`` workers: one per four workers, at most one per CPU. HAProxy takes about a
    fifth of what its workers take per request (``bench/bench_workers.py``), so one thread keeps up with four;
    HAProxy's own default, a thread per CPU, costs more per request when the workers want those CPUs too (a
    thread woken for a few requests: 12-16 % more HAProxy CPU per rollout at ``--workers 2`` on 2 cores)."""
    return max(1, min(cpus or os.cpu_count() or 1, (backends + 3) // 4))


def haproxy_config(
    *,
    listen_fd: int,
    backends: list[Backend],
    cookie_name: str,
    session_ttl_seconds: float = 3600.0,
    max_sessions: int = 0,
    server_timeout_seconds: float = 3600.0,
    stats_socket: str | None = None,
    stride: int = 1,
    limits: ClientLimits = ClientLimits(),
) -> str:
    """The HAProxy configuration: listen on the inherited socket ``listen_fd``, route each request to the slot its
    session id names (backend I is slot I; nothing is stored per session: ``session_ttl_seconds`` and
    ``max_sessions`` are accepted for the callers' sake and unused). ``stats_socket``: a unix socket
    path for HAProxy's runtime API (``show stat``), mode 0600. ``stride``: the product of the counts of the routing
    levels outside this one (1 when this proxy is the outermost; see ``ngym.server.sessions.routing``). ``limits``:
    the workers' own limits per client, which HAProxy enforces in their place (it reads each request before they do):
    header size, the time for the headers and for the body (408, with a JSON message naming the settings), the
    idle keep-alive time."""
    count = max(1, len(backends))
    typed_paths = "path_end /seed_session /close_session"
    # Several backends: one failed connection marks a worker down at once, so seeds stop going to it and its
    # rollouts' requests, refused, are redispatched at once (a server counted down is not retried after a pause)
    # and answered elsewhere as lost, without waiting for the checks. One backend (the ray engine's one-replica
    # environments): there is nowhere else to go, and under load a single slow connect would only turn into ~1 s
    # of 503s for a healthy server; the checks alone still take a dead one out within ~2 s (fall 2, inter 1s).
    observe = " observe layer4 error-limit 1 on-error mark-down" if len(backends) > 1 else ""
    servers = "\n".join(
        f"    server {b.name} {b.address} check inter 1s fall 2 rise 1{observe}" + (" disabled" if b.disabled else "")
        for b in backends
    )
    duplicate = f"if {{ req.cook_cnt({cookie_name}) gt 1 }}"
    duplicate_episode = f"if {{ path_beg {OPENENV_PATH}/ }} {{ req.cook_cnt({OPENENV_EPISODE_COOKIE}) gt 1 }}"
    stats = f"\n    stats socket {stats_socket} mode 600 level user" if stats_socket else ""
    routing = ""
    stride_op = f"div({stride})," if stride > 1 else ""
    episode, openenv = OPENENV_EPISODE_COOKIE, OPENENV_PATH
    ors, ors_roots = ORS_MOUNT_PATH, " ".join(sorted(ORS_ROOT_SEGMENTS))
    if count > 1:
        routing = "\n".join(
            [
                "    # the routing key, by precedence (a later line overrides an earlier one): the typed body's id,",
                "    # else the id inside the session cookie (its value before the signature), else the rollout prefix",
                "    http-request set-var(txn.ngym_key) path,field(3,/) if { path_beg /ng-rollout/ }",
                f"    http-request set-var(txn.ngym_key) req.cook({cookie_name}),regsub(\\.[^.]*$,) "
                f"if {{ req.cook_cnt({cookie_name}) eq 1 }}",
                "    http-request set-var(txn.ngym_key) req.body,json_query('$.resources_session_id') "
                f"if {{ {typed_paths} }} {{ req.body,json_query('$.resources_session_id') -m found }}",
                "    # an ORS session's requests carry the id the worker's ORS front made (ngym.server.fronts.ors) in",
                "    # X-Session-ID; only ORS requests are routed by it (under /ors, or an ORS route at the root), as",
                "    # only they are read by it: a stray X-Session-ID beside a session cookie never moves a request",
                f"    acl ors_request path {ors}",
                f"    acl ors_request path_beg {ors}/",
                f"    acl ors_request path,field(2,/) -m str {ors_roots}",
                "    http-request set-var(txn.ngym_key) req.fhdr(x-session-id,1) "
                "if ors_request { req.fhdr(x-session-id,1) -m found }",
                "    # an OpenEnv episode held between HTTP requests (ngym.server.fronts.openenv): its cookie, the",
                "    # WebSocket that attaches to it (?session_id=), an MCP call naming it (params.session_id)",
                f"    http-request set-var(txn.ngym_key) req.cook({episode}) "
                f"if {{ path_beg {openenv}/ }} {{ req.cook_cnt({episode}) eq 1 }}",
                f"    http-request set-var(txn.ngym_key) url_param(session_id) "
                f"if {{ path {openenv}/ws }} {{ url_param(session_id) -m found }}",
                "    http-request set-var(txn.ngym_key) req.body,json_query('$.params.session_id') "
                f"if {{ path {openenv}/mcp }} {{ req.body,json_query('$.params.session_id') -m found }}",
                f"    http-request set-var(txn.ngym_slot) var(txn.ngym_key),crc32,{stride_op}mod({count}) "
                "if { var(txn.ngym_key) -m found }",
                "    # ngym status reads each worker's /health by naming its slot (nothing else is routed so)",
                f"    http-request set-var(txn.ngym_slot) req.hdr_val({HEALTH_SLOT_HEADER}) "
                f"if {{ path /health }} {{ req.hdr_val({HEALTH_SLOT_HEADER}) -m found }}",
                *(
                    f"    use-server {b.name} if {{ var(txn.ngym_slot) -m int {i} }}"
                    for i, b in enumerate(backends)
                    if not b.disabled  # a slot that never came up holds no session: its ids are balanced
                ),
            ]
        )
    return f"""# written by ngym (ngym.server.hosting.haproxy); regenerated at every start
global
    log stderr format short local0 warning{stats}
    nbthread {proxy_threads(count)}
    tune.bufsize {proxy_bufsize(limits.max_header_bytes)}

defaults
    mode http
    log global
    option dontlognull
    timeout connect 2s
    timeout client 1h
    timeout server {int(server_timeout_seconds)}s
    timeout http-request {haproxy_time(limits.header_timeout_seconds)}
    timeout http-keep-alive {haproxy_time(limits.keep_alive_seconds)}
    timeout queue 30s
    # a request whose worker cannot be connected to (dead) goes to another one (which answers 410 / session_lost
    # for a lost session); retries happen only when the connection failed, i.e. the request was never sent
    option redispatch
    retries 2
    retry-on conn-failure

frontend ngym
    bind fd@{listen_fd}
    # no traffic log: at the warning level above it would all be dropped, after HAProxy had formatted a line per
    # request anyway (its "Connect from" line; the backend keeps the log of its workers going down and up)
    no log
    # the body is read before routing (a typed seed's id is in it), for as long as a worker would wait for it
    # (headers late: HAProxy's own 408 page; a body late: the worker's answer)
    http-request wait-for-body time {haproxy_time(limits.body_timeout_seconds)}
    http-error status 408 content-type application/json string '{limits.body_timeout_answer}'
    # two session cookies: the proxy and the server could read different sessions from one request
    http-request return status 400 content-type application/json string '{_DUPLICATE_COOKIE_BODY}' {duplicate}
    http-request return status 400 content-type application/json string '{_DUPLICATE_EPISODE_BODY}' {duplicate_episode}
    default_backend workers

backend workers
    balance leastconn
    option httpchk GET /livez
    # a session's request goes to its own worker even when the checks count it down (a paused or slow worker
    # still holds the session: the request waits for it); only a refused connection redispatches it (defaults)
    option persist
    http-check expect status 200
{routing}
    # which worker answered: for logs and tests (set by HAProxy, costs the workers nothing)
    http-response set-header X-Ngym-Worker %s
{servers}
"""


__all__ = [
    "Backend",
    "HAPROXY_BATCH_ENV",
    "batch_scheduling",
    "haproxy_batch",
    "HAPROXY_ENV",
    "HAPROXY_INSTALL_HINT",
    "HAPROXY_NICE_ENV",
    "DEFAULT_HAPROXY_NICE",
    "HEALTH_SLOT_HEADER",
    "haproxy_binary",
    "haproxy_command",
    "haproxy_config",
    "haproxy_version",
    "haproxy_nice",
    "lower_priority",
    "proxy_threads",
]
