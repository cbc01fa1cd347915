"""The local engine's front: one HAProxy per environment, on the environment's URL, in front of its unit.

A unit that dies (its ``ngym run`` killed, out of memory) would leave its port closed, and a closed port is
retried without end by NeMo Gym's client (its collector never finishes). Behind the front, the dead unit's
requests are answered ``503`` at once: an HTTP answer ends a client's request, so NeMo Gym's collector records
those rows as failed and finishes. The Ray engine's front does the same on the cluster
(:mod:`ngym.fleet.ray_front`); both use :func:`ngym.server.hosting.haproxy.haproxy_config`.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from ngym.fleet.spec import EnvironmentSpec
from ngym.fleet.state import ProcessRecord
from ngym.processes import spawn
from ngym.server.hosting.client_limits import ClientLimits
from ngym.server.hosting.haproxy import Backend, haproxy_binary, haproxy_command, haproxy_config


def affinity_settings(env: EnvironmentSpec) -> tuple[str, float, int]:
    """The session cookie's name, the session TTL and the session cap a front's HAProxy needs (the
    environment's overrides, else the defaults of ``BaseResourcesServerConfig``)."""
    return (
        str(_setting(env, "session_cookie_name")),
        float(_setting(env, "session_ttl_seconds")),
        int(_setting(env, "max_sessions")),
    )


def client_limits(env: EnvironmentSpec) -> ClientLimits:
    """What the environment's unit allows one client (its header size, header and body times, keep-alive time):
    its front's HAProxy, which reads each request first, holds clients to the same."""
    return ClientLimits.from_settings(lambda key: _setting(env, key))


def _setting(env: EnvironmentSpec, key: str) -> Any:
    from ngym.server.pipeline.resources import BaseResourcesServerConfig

    return env.config.get(key, BaseResourcesServerConfig.model_fields[key].default)


def start_front(
    env: EnvironmentSpec, listen: tuple[str, int], backend: tuple[str, int], folder: Path, name: str
) -> ProcessRecord:
    """Start HAProxy listening on ``listen``, forwarding to the unit at ``backend``, in its own session (as
    every process of the fleet: ``down`` stops its group). ``ConfigError`` when HAProxy is not installed."""
    binary = haproxy_binary()
    cookie_name, ttl, max_sessions = affinity_settings(env)
    with socket.socket(socket.AF_INET6 if ":" in listen[0] else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(listen)
        sock.listen(1024)
        sock.set_inheritable(True)
        config = folder / f"{name}.front.cfg"
        config.write_text(
            haproxy_config(
                listen_fd=sock.fileno(),
                backends=[Backend("unit", backend[0], backend[1])],
                cookie_name=cookie_name,
                session_ttl_seconds=ttl,
                max_sessions=max_sessions,
                limits=client_limits(env),
            )
        )
        log = folder / f"{name}.front.log"
        proc = spawn(haproxy_command(binary, str(config)), log, pass_fds=(sock.fileno(),))
    return ProcessRecord.started(proc.pid, log)
