"""Serve a spec with uvicorn: one server in this process, several as supervised children, or N workers.

``ngym run`` and ``SimpleServer.run_webserver()`` both end here. One server runs in this process; several
run as child processes (one per instance) supervised here; ``--workers N`` runs uvicorn's worker processes when
the session store is shared (Redis), each building the app from the spec passed in ``NGYM_SERVE_SPEC``
(``ngym.server.hosting.worker.app_from_env``), and otherwise N single-worker processes behind HAProxy, which
routes each rollout to the worker holding its session (``ngym.server.hosting.affinity``).
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.supervisors import Multiprocess

from ngym import processes
from ngym.child_python import children_use_safe_path, forget_safe_path, python_module
from ngym.config import apply_overrides, default_instance_name, instances_from_files, split_overrides
from ngym.errors import ConfigError, run_guarded
from ngym.server.hosting.affinity import LISTEN_FD_ENV, AffineWorkers
from ngym.server.hosting.client_limits import ClientLimits
from ngym.server.hosting.cpu_priority import apply_cpu_priorities
from ngym.server.hosting.fork_template import prepare_fork_template
from ngym.server.hosting.haproxy import HAPROXY_INSTALL_HINT, haproxy_binary
from ngym.server.pipeline import http_protocol, websocket_protocol
from ngym.server.pipeline.app import SPEC_ENV, ServeSpec, build_app, build_server, load_server_class, working_directory
from ngym.server.pipeline.base import CLASS_OVERRIDES_ENV
from ngym.server.pipeline.resources import SimpleResourcesServer
from ngym.server.pipeline.traffic import TRAFFIC_FILE_ENV, make_traffic_file
from ngym.server.sessions.cookies import SESSION_SECRET_ENV, secret_configured, withhold_secret_from_children

log = logging.getLogger("ngym.serve")


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


# _serving_only: the process that serves a listening socket makes it not inheritable before the environment runs.
# It is inheritable only to be handed on (to HAProxy, to the workers of a set, by pass_fds). uvloop's
# create_subprocess_exec ignores close_fds, so every child an environment starts with asyncio (an inner server, a
# worker, a sandbox command) got it and could accept() the server's connections and answer them.


def _listen_line(spec: ServeSpec, host: str, port: int, domain: str | None, workers: int) -> str:
    """Where the server really listens (in a container, the published port may differ: not guessed here)."""
    extra = f", {workers} workers" if workers > 1 else ""
    bound = f"[{host}]" if ":" in host else (host or "0.0.0.0")
    every = " (all interfaces)" if host in ("0.0.0.0", "", "::") else ""
    return f"ngym: serving {spec.name} ({domain or '?'}{extra}) at http://{bound}:{port}{every}  (docs: /docs)"


def needs_affine_workers(server: SimpleResourcesServer, workers: int) -> bool:
    """Whether ``workers`` > 1 must be separate processes behind a session-affine proxy
    (``ngym.server.hosting.affinity``): the sessions stay in each process (the memory store, or live state that
    cannot be serialised).

    With a store the workers share (Redis) any worker could serve NeMo Gym's wire, but the ORS and OpenEnv fronts
    keep each episode (its row and trajectory) in the process that opened it, and their clients send each request
    on a connection of its own: on uvicorn's own workers half an ORS session's calls reached a worker that did not
    hold it (404). So the workers are affine whenever HAProxy is installed (a session whose worker is down is
    still served from the shared store by another); without HAProxy, uvicorn's workers serve and a warning says
    what does not work."""
    if workers <= 1:
        return False
    store = server.sessions.store
    if not store.shared_between_processes or type(server).session_affinity_required:
        return True
    try:
        haproxy_binary()
    except ConfigError:
        log.warning(
            "HAProxy is not installed: %d uvicorn workers serve NeMo Gym's wire from the shared session store, but "
            "an ORS session (/ors) or an OpenEnv episode held over HTTP (/openenv/reset, openenv/session/create) "
            "is kept by the worker that opened it, and its later requests may reach another one (404/409). "
            "Install HAProxy (%s) or run one worker",
            workers,
            HAPROXY_INSTALL_HINT,
        )
        return False
    return True


def _graceful_server(config: Any) -> Any:
    """A uvicorn server that exits 0 after a graceful SIGINT/SIGTERM shutdown.

    uvicorn re-raises the signal once it has shut down (exit status -15 or 130), which supervisors read as
    a crash; ngym has already closed every session by then, so a clean stop is reported as one.
    """

    class GracefulServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()

    return GracefulServer(config)


def share_secret_between_workers(spec: ServeSpec, workers: int) -> None:
    """The workers of one ``ngym run`` must accept each other's cookies: with no configured secret, make one
    for all of them (through the environment the workers inherit). Replicas must still be given one."""
    if workers <= 1 or spec.fields.get("session_secret") or secret_configured():
        return
    os.environ[SESSION_SECRET_ENV] = secrets.token_urlsafe(32)
    log.info(
        "no session secret configured: made one shared by the %d workers of this process; replicas on other "
        "processes or machines need the same %s",
        workers,
        SESSION_SECRET_ENV,
    )


def serve_one(
    spec: ServeSpec, workers: int = 1, access_log: bool = False, cls: type[SimpleResourcesServer] | None = None
) -> None:
    """Serve one spec in this process (uvicorn workers when ``workers`` > 1) until SIGINT/SIGTERM."""
    cls = cls or spec.load_class()
    enter_working_directory(spec.target)
    apply_cpu_priorities()  # before the environment is built: the threads and processes it starts are covered
    server = build_server(spec, cls)
    app = build_app(server, app_plugins=spec.app_plugins)
    affine = needs_affine_workers(server, workers)
    share_secret_between_workers(spec, workers)
    inherited = os.environ.pop(LISTEN_FD_ENV, None)  # a worker of an affine set: its socket comes from the supervisor
    if inherited is not None:
        sock = socket.socket(fileno=int(inherited))
        sock.set_inheritable(False)  # see _serving_only
        withhold_secret_from_children()
        server.before_serving()
        prepare_fork_template()  # each affine worker is a template for the children its environment forks
        proxied = reached_only_through_proxy(sock)
        config = uvicorn_config(server, app, access_log=access_log, lifespan="on", proxied=proxied)
        _graceful_server(config).run(sockets=[sock])
        return
    host, port = server.config.host, server.config.port
    sock = _bind(host, port)
    port = sock.getsockname()[1]
    domain = server.resolved_domain()
    if affine:
        settings = server.config
        supervisor = AffineWorkers(
            spec,
            workers,
            sock,
            cookie_name=settings.session_cookie_name,
            session_ttl_seconds=settings.session_ttl_seconds,
            max_sessions=settings.max_sessions,
            access_log=access_log,
            limits=ClientLimits.from_settings(lambda name: getattr(settings, name)),
        )
        line = _listen_line(spec, host, port, domain.value if domain else None, workers)
        print(f"{line}  [session-affine: HAProxy in front of {workers} single-worker processes]", flush=True)
        children_use_safe_path()  # its workers: never the current folder's packages (they clear it for their own)
        code = supervisor.run()
        if code:
            raise SystemExit(code)
        return
    print(_listen_line(spec, host, port, domain.value if domain else None, workers), flush=True)
    if workers > 1:
        os.environ[SPEC_ENV] = spec.to_json()
        config = uvicorn_config(
            server, "ngym.server.hosting.worker:app_from_env", factory=True, workers=workers, access_log=access_log
        )
        # the workers share one socket, so /health reaches any of them: they count in one file (traffic.py)
        with tempfile.TemporaryDirectory(prefix="ngym-traffic-") as folder:
            counters = Path(folder) / "traffic"
            make_traffic_file(counters)
            os.environ[TRAFFIC_FILE_ENV] = str(counters)
            if "target" in inspect.signature(Multiprocess).parameters:  # uvicorn before 0.30
                Multiprocess(config, target=_graceful_server(config).run, sockets=[sock]).run()  # type: ignore[call-arg]
            else:  # newer uvicorn builds each worker's server from the config itself
                Multiprocess(config, sockets=[sock]).run()
        return
    sock.set_inheritable(False)  # see _serving_only
    withhold_secret_from_children()  # the app has its secret: what the environment starts never inherits it
    server.before_serving()
    prepare_fork_template()  # after the environment is built, before it serves: its forked children start warm
    config = uvicorn_config(server, app, access_log=access_log, lifespan="on")
    _graceful_server(config).run(sockets=[sock])


def reached_only_through_proxy(sock: socket.socket) -> bool:
    """Whether the socket a worker of an affine set inherited is reached only through its HAProxy: a unix socket
    (in the supervisor's private folder, ``ngym.server.hosting.affinity``). The loopback TCP port it falls back to
    is reachable by anyone on the machine, so a worker there serves as any server does."""
    return hasattr(socket, "AF_UNIX") and sock.family == socket.AF_UNIX


def enter_working_directory(target: str) -> None:
    """Change into the directory the target's module asks for, if any (this serving process only)."""
    directory = working_directory(target)
    if directory:
        os.chdir(directory)


def uvicorn_config(server: SimpleResourcesServer, app: Any, *, proxied: bool = False, **options: Any) -> uvicorn.Config:
    """uvicorn's config for a server, with its HTTP limits: keep-alive, header deadline and size (the body
    limits live in the app itself, see ``ngym.server.pipeline.request_limits``), WebSocket compression only
    when the config asks for it (``websocket_compression``), and uvicorn's WebSocket protocol with a direct path
    for whole text messages (``ngym.server.pipeline.websocket_protocol``).

    ``proxied``: a worker of ``ngym run --workers N`` that only its HAProxy reaches (its unix socket is in the
    supervisor's folder, mode 0700). It keeps every limit, and skips what does nothing there: uvicorn's
    ``X-Forwarded-*`` handling (HAProxy sets no such header, and a unix socket's peer has no address uvicorn would
    trust), its ``server: uvicorn`` header, and its keep-alive timer per response
    (``http_protocol.ProxiedHttpToolsProtocol``: the connection's own timer closes it once idle)."""
    settings = server.config
    if proxied:
        options = {"proxy_headers": False, "server_header": False, **options}
    config = uvicorn.Config(
        app,
        log_level="warning",
        http=http_protocol.protocol_class(proxied=proxied),
        timeout_keep_alive=settings.keep_alive_timeout_seconds,  # type: ignore[arg-type]  # uvicorn says int
        h11_max_incomplete_event_size=settings.max_request_header_bytes,
        ws_per_message_deflate=settings.websocket_compression,
        ws=websocket_protocol.protocol_class(),
        **options,
    )
    http_protocol.configure(
        config,
        header_timeout=settings.request_header_timeout_seconds,
        max_header_bytes=settings.max_request_header_bytes,
    )
    return config


def serve_many(specs: list[ServeSpec], workers: int = 1, access_log: bool = False) -> int:
    """Serve several specs, one child process each; stop them all on SIGINT/SIGTERM or when one dies."""
    children: list[subprocess.Popen[bytes]] = []
    for spec in specs:
        # The spec (which may hold session_secret) goes through the environment, never the command line: any
        # process on the host can read every command line in /proc.
        cmd = python_module("ngym.server.hosting.host", str(workers), "1" if access_log else "0")
        children.append(
            processes.spawn(cmd, processes.INHERIT, env={**os.environ, SPEC_ENV: spec.to_json()}, new_session=False)
        )

    def stop(_signum: int, _frame: Any) -> None:
        processes.terminate(children)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    while any(child.poll() is None for child in children):
        for child in children:
            if child.poll() not in (None, 0) and code == 0:
                code = child.returncode or 1
                stop(signal.SIGTERM, None)
        time.sleep(0.1)
    return code


def run_server_class(target: str, overrides: dict[str, Any], argv: list[str]) -> None:
    """``MyServer.run_webserver()`` (which execs ``python -m ngym.server.hosting.host --class TARGET``): config from
    ``key=value`` / ``+config_paths=[...]`` arguments and the keyword ``overrides``."""
    cls = load_server_class(target)
    paths, dotted = split_overrides(argv)
    if paths:
        instances = instances_from_files(paths, dotted)
        chosen = next((i for i in instances if i.server_type == "resources_servers"), None)
        if chosen is None:
            raise ConfigError("no resources_servers instance in the given config")
        fields, name = chosen.fields, chosen.name
    else:
        fields, name = apply_overrides({}, dotted), default_instance_name(cls)
    fields = {**fields, **overrides}
    workers = int(fields.get("num_workers") or 1)
    serve_one(ServeSpec(target=target, name=name, fields=fields), workers=workers, cls=cls)


def main(argv: list[str]) -> None:
    """``python -m ngym.server.hosting.host``: ``--class TARGET [key=value ...]`` (from ``run_webserver``; its keyword
    overrides' JSON in ``NGYM_CLASS_OVERRIDES``) or ``WORKERS ACCESS_LOG`` (a child of ``serve_many``; the spec's JSON
    in ``NGYM_SERVE_SPEC``). Neither puts a config, which may hold session_secret, on the command line."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    forget_safe_path()  # this process started without the current folder on sys.path; its own children as usual
    if argv[:1] == ["--class"]:
        overrides = os.environ.pop(CLASS_OVERRIDES_ENV, "{}")  # popped: the uvicorn workers need not see it
        run_guarded(lambda: run_server_class(argv[1], json.loads(overrides), argv[2:]))
    else:
        run_guarded(lambda: serve_one(ServeSpec.from_json(os.environ.pop(SPEC_ENV)), int(argv[0]), argv[1] == "1"))


if __name__ == "__main__":
    main(sys.argv[1:])
