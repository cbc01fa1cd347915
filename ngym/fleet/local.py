"""The local engine: every server of the fleet as a process on this machine, each in its own process group.

``up`` starts the environments (each one ``ngym run ... --workers N`` unit, in its own virtualenv if it names
requirements), waits for each one's ``/health``, writes the global config with the domains they report, starts
the head server and then the NeMo Gym servers the file lists (agents, models: they read the config at start).
A server that fails (its process exits, its venv cannot be made, it does not answer in time) is recorded with
its reason and left out of the global config; the others come up. ``down`` stops every process ``up`` started.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ngym.child_server import LOOPBACK, free_port
from ngym.errors import ConfigError, NgymError
from ngym.fleet.bringup import (
    STARTUP_SECONDS,
    Reporter,
    finish,
    new_state,
    port_taken,
    record_maker,
    recorded,
    spawn_server,
    stop_processes,
    wait_for,
)
from ngym.fleet.front import start_front
from ngym.fleet.isolation import ensure_venv
from ngym.fleet.launch import environment_command, environment_env, environment_target
from ngym.fleet.spec import FleetSpec
from ngym.fleet.state import FleetState, ServerRecord
from ngym.server.hosting.haproxy import HAPROXY_INSTALL_HINT, haproxy_binary


def up(spec: FleetSpec, reporter: Reporter | None = None, startup_seconds: float = STARTUP_SECONDS) -> FleetState:
    """Bring the fleet up on this machine; returns its state (also saved in its state dir)."""
    report = reporter or Reporter()
    state = new_state(spec, "local")
    state_dir = spec.state_dir()
    logs = state_dir / "logs"

    fronted = _have_haproxy(report)
    # 1. environments: isolation (venvs, possibly slow: one at a time, with progress), then start all, each
    # behind its front (the environment's URL) when HAProxy is here
    for name, env in spec.environments.items():
        port = env.port or free_port(spec.host)
        unit_host, unit_port = (LOOPBACK, free_port(LOOPBACK)) if fronted else (spec.host, port)
        record = state.servers[name] = ServerRecord(kind="environment", host=spec.host, port=port, workers=env.workers)
        log = logs / f"{name}.log"
        try:
            lines = env.isolation_key(spec.base_dir, name)
            python = None
            if lines:
                report.status = f"{name}: virtualenv"
                venv_log = logs / f"{name}.venv.log"
                maker = record_maker(state, state_dir, record, venv_log)
                python = str(ensure_venv(lines, venv_log, _prefixed(report, name), started=maker))
                record.process = None  # its makers are done
            cmd = environment_command(spec, env, unit_host, unit_port, python, name)
            record.target, record.python = environment_target(spec, env, name), python or ""
        except NgymError as exc:
            record.process = None
            record.reason = str(exc)
            report.line(f"{name}: FAILED: {exc}")
            continue
        taken = "" if fronted else port_taken(unit_host, unit_port)  # a front binds the port itself, below
        if taken:
            record.reason = taken
            report.line(f"{name}: FAILED: {taken}")
            continue
        with recorded(state, state_dir):
            record.process = spawn_server(cmd, log, cwd=spec.base_dir, env={**os.environ, **environment_env(env)})
        if fronted:
            try:
                with recorded(state, state_dir):
                    record.front = start_front(env, (spec.host, port), (unit_host, unit_port), logs, name)
            except OSError as exc:  # its port is taken
                record.reason = f"cannot listen on {spec.host}:{port}: {exc.strerror}"
                report.line(f"{name}: FAILED: {record.reason}")
                record.process.stop()
    wait_for(state, [n for n in spec.environments], report, startup_seconds, "/health")
    for record in state.servers.values():
        if not record.ok and record.front is not None:  # nothing behind it
            record.front.stop()

    return finish(spec, state, report, startup_seconds)


def _have_haproxy(report: Reporter) -> bool:
    """Whether environments get a front (HAProxy is installed); says once what is missing when it is not."""
    try:
        haproxy_binary()
    except ConfigError:
        report.line(
            f"(no HAProxy here: an environment whose process dies leaves its port closed, which NeMo Gym's client "
            f"retries without end; {HAPROXY_INSTALL_HINT} gives each one a front that answers 503)"
        )
        return False
    return True


def down(state: FleetState, timeout: float = 10.0) -> list[str]:
    """Stop every process ``up`` started (servers first, the head server last); the names that were running."""
    return stop_processes(state, timeout)


def _prefixed(report: Reporter, name: str) -> Callable[[str], None]:
    return lambda message: report.line(f"{name}: {message}")
