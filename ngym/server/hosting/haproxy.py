"""HAProxy as the session-affine front of ``ngym run --workers N`` (environments whose state stays in the process).

Why HAProxy (Debian's ``haproxy`` package) and not nginx or a balancer of ngym's own: a rollout's first request
(the seed) carries no session yet, so the proxy must *learn* which worker made the session from that worker's
answer. HAProxy's stick tables do exactly that (``stick store-response res.cook(...)``: the ``Set-Cookie`` of the
seed's answer pins the session to the worker that sent it), and can also key on the request path (the
``/ng-rollout/<id>/`` prefix) and on a JSON field of the body (``resources_session_id`` of NeMo Gym 0.7's typed
seed and close). Open-source nginx can only hash a key (``hash $cookie_x consistent``), which cannot send a session
back to the worker that happened to create it (its ``sticky learn`` is in the commercial edition only).

Routing, in order: the session cookie's value; the ``/ng-rollout/<id>/`` prefix; the typed body's
``resources_session_id`` (``/seed_session``, ``/close_session``); an ORS session's ``X-Session-ID`` header (the
ORS front keeps an ORS session in the process that seeded it); else least connections. A worker that fails its
health check (``GET /livez``) is left out and its sessions' requests go to another worker (``option redispatch``),
which does not hold them: a verify there is masked ``session_lost`` and a tool call is 410
(``ngym.server.sessions.lost``), never a wrong reward. A request is retried on another worker only when the
connection could not be made (it was never sent), so no tool call or verify ever runs twice.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from ngym.errors import ConfigError

HAPROXY_INSTALL_HINT = "apt-get install haproxy (Debian/Ubuntu) or dnf install haproxy"
#: The HAProxy executable to use instead of the one on ``PATH``.
HAPROXY_ENV = "NGYM_HAPROXY"


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


@dataclass(frozen=True)
class Backend:
    """One worker HAProxy sends requests to."""

    name: str
    host: str
    port: int


def haproxy_config(
    *,
    listen_fd: int,
    backends: list[Backend],
    cookie_name: str,
    session_ttl_seconds: float,
    max_sessions: int,
    server_timeout_seconds: float = 3600.0,
) -> str:
    """The HAProxy configuration: listen on the inherited socket ``listen_fd``, route session-affinely."""
    ttl = max(1, int(session_ttl_seconds) + 60)  # outlives the session's own idle TTL
    size = max(1024, 2 * max_sessions * max(1, len(backends)))  # every cookie ngym hands out takes an entry
    typed_paths = "path_end /seed_session /close_session"
    # Several backends: one failed connection marks a worker down at once, so its rollouts go elsewhere (and are
    # masked there) without waiting for the checks. One backend (the ray engine's one-replica environments): there
    # is nowhere else to go, and under load a single slow connect would only turn into ~1 s of 503s for a healthy
    # server; the checks alone still take a dead one out within ~2 s (fall 2, inter 1s).
    observe = " observe layer4 error-limit 1 on-error mark-down" if len(backends) > 1 else ""
    servers = "\n".join(
        f"    server {b.name} {b.host}:{b.port} check inter 1s fall 2 rise 1{observe}" for b in backends
    )
    return f"""# written by ngym run --workers (ngym.server.haproxy); regenerated at every start
global
    log stderr format short local0 warning

defaults
    mode http
    log global
    option dontlognull
    timeout connect 2s
    timeout client 1h
    timeout server {int(server_timeout_seconds)}s
    timeout http-request 60s
    timeout http-keep-alive 5s
    timeout queue 30s
    # a request whose worker is down goes to another one (which answers 410 / session_lost for a lost session);
    # retries happen only when the connection failed, i.e. the request was never sent
    option redispatch
    retries 2
    retry-on conn-failure

frontend ngym
    bind fd@{listen_fd}
    option http-buffer-request
    default_backend workers

backend workers
    balance leastconn
    option httpchk GET /livez
    http-check expect status 200
    stick-table type string len 512 size {size} expire {ttl}s
    stick match req.cook({cookie_name})
    stick store-response res.cook({cookie_name})
    stick on path,field(3,/) table rollout_ids if {{ path_beg /ng-rollout/ }}
    stick on req.body,json_query('$.resources_session_id') table typed_ids if {{ {typed_paths} }}
    stick on req.hdr(x-session-id) table ors_ids if {{ req.hdr(x-session-id) -m found }}
    # which worker answered: for logs and tests (set by HAProxy, costs the workers nothing)
    http-response set-header X-Ngym-Worker %s
{servers}

backend rollout_ids
    stick-table type string len 256 size {size} expire {ttl}s

backend typed_ids
    stick-table type string len 256 size {size} expire {ttl}s

backend ors_ids
    stick-table type string len 256 size {size} expire {ttl}s
"""


__all__ = ["Backend", "HAPROXY_ENV", "HAPROXY_INSTALL_HINT", "haproxy_binary", "haproxy_config"]
