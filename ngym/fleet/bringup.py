"""What every engine's ``up`` and ``down`` share: the progress reporter, a fresh state, and the second half of
``up`` (:func:`finish`: the global config, the head server, NeMo Gym's servers), and stopping the processes a
state names (:func:`stop_processes`).

An engine (``ngym.fleet.engines``) starts the environments its own way (processes, Compose projects, Ray
actors), records them in the state, then calls :func:`finish`; its ``down`` stops what it runs elsewhere and
calls :func:`stop_processes` for the processes on this machine.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen
from typing import Protocol

from ngym.child_python import python_module
from ngym.child_server import free_port
from ngym.errors import NgymError
from ngym.fleet.global_config import build_global_config, dump
from ngym.fleet.launch import server_command, server_env
from ngym.fleet.spec import FleetSpec
from ngym.fleet.state import FleetState, ProcessRecord, ServerRecord, write_private
from ngym.processes import fetch_json, log_line, spawn, status_of

#: seconds a server has to answer after its process started (NGYM_FLEET_STARTUP_SECONDS overrides)
STARTUP_SECONDS = 180.0


class FleetAlreadyUp(NgymError):
    """``up`` of a fleet that is up: refused before anything is started (and nothing of it is stopped)."""


class Reporter:
    """Where ``up`` reports: ``line`` for events worth a line, ``status`` for a progress line to redraw."""

    def __init__(self, line: Callable[[str], None] = lambda _: None) -> None:
        self.line = line
        self.status = ""


def new_state(spec: FleetSpec, engine: str) -> FleetState:
    """A fresh state for ``up`` (refused while a previous ``up`` of this fleet still runs)."""
    state_dir = spec.state_dir()
    (state_dir / "logs").mkdir(parents=True, exist_ok=True, mode=0o700)
    state_dir.chmod(0o700)  # its files may hold secrets
    previous = FleetState.load(state_dir)
    if previous is not None and (
        previous.project or any(p.alive() for r in _records(previous) for p in (r.process, r.front) if p is not None)
    ):
        raise FleetAlreadyUp(f"fleet {spec.name!r} is already up (state in {state_dir}); `ngym down` it first")
    head_port = int(spec.head_server.get("port", 11000)) or free_port(spec.host)
    head_host = str(spec.head_server.get("host", spec.host))
    for path in (state_dir / "global_config.yaml", state_dir / "server_instances.json"):
        path.unlink(missing_ok=True)
    state = FleetState(name=spec.name, engine=engine, head=ServerRecord(kind="head", host=head_host, port=head_port))
    state.save(state_dir)  # from now on `ngym down` finds each process as soon as it started
    return state


@contextlib.contextmanager
def recorded(state: FleetState, state_dir: Path) -> Iterator[None]:
    """Start a process in the block and save the state after it, with Ctrl-C and SIGTERM held back meanwhile
    (and raised as ``KeyboardInterrupt`` after): a process that started is in the saved state before ``up`` can
    be interrupted (and stop it). Held back by a handler, not by the signal mask, which children would inherit."""
    held: list[int] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
        state.save(state_dir)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held:
        signal.raise_signal(held[0])


class RemoteHead(Protocol):
    """A head server an engine runs elsewhere (the ray engine's front actor): ``state.head`` holds its address
    before :func:`finish` runs; ``start`` serves the config text there, ``publish`` its ``/server_instances``."""

    def start(self, config_text: str) -> None: ...

    def publish(self, instances_json: str) -> None: ...


def finish(
    spec: FleetSpec,
    state: FleetState,
    report: Reporter,
    startup_seconds: float,
    head: RemoteHead | None = None,
    extra_config: dict[str, object] | None = None,
) -> FleetState:
    """After the environments answered (on any engine): write the global config with the domains they report
    (and ``extra_config``'s top-level keys), start the head server (here, or ``head`` where the engine runs it),
    then the other servers (they read the config at start); save the state."""
    state_dir = spec.state_dir()
    logs = state_dir / "logs"
    head_host, head_port = state.head.host, state.head.port
    # the global config (environments that came up, with their domains), the head server
    domains = {name: _domain(state.servers[name]) for name in spec.environments if state.servers[name].ok}
    for name, server in spec.servers.items():
        port = int(server.config.get("port") or 0) or free_port(spec.host)
        state.servers[name] = ServerRecord(kind="server", host=str(server.config.get("host", spec.host)), port=port)
    named = {n: (r.host, r.port) for n, r in state.servers.items() if r.kind == "server" or r.ok}
    kept = spec.model_copy(update={"environments": {n: e for n, e in spec.environments.items() if state.servers[n].ok}})
    config = {**build_global_config(kept, (head_host, head_port), named, domains), **(extra_config or {})}
    text = dump(config)
    write_private(state_dir / "global_config.yaml", text)  # every server's keys: the head server serves it redacted
    if head is None:
        head_cmd = python_module(
            "ngym.fleet.head",
            str(state_dir / "global_config.yaml"),
            str(state_dir / "server_instances.json"),
            head_host,
            str(head_port),
        )
        taken = port_taken(head_host, head_port)
        if taken:  # else whatever listens there answers the readiness poll, and is reported as the head server
            state.head.reason = taken
            report.line(f"(head): FAILED: {taken}")
        else:
            with recorded(state, state_dir):
                state.head.process = spawn_server(head_cmd, logs / "head_server.log", cwd=spec.base_dir)
    else:
        head.start(text)
        state.save(state_dir)

    # NeMo Gym servers started as NeMo Gym starts them (config injected); external ones are only named
    for name, server in spec.servers.items():
        record = state.servers[name]
        if server.launch is None:
            record.ok, record.reason = True, "external (not started by the fleet)"
            continue
        cmd, cwd = server_command(server, record.host, record.port, spec.base_dir)
        taken = port_taken(record.host, record.port)
        if taken:
            record.reason = taken
            report.line(f"{name}: FAILED: {taken}")
            continue
        try:
            with recorded(state, state_dir):
                record.process = spawn_server(cmd, logs / f"{name}.log", cwd=cwd, env=server_env(text, name))
        except OSError as exc:  # its folder or interpreter is missing: named, the others go on
            record.reason = f"cannot start `{cmd[0]}` in {cwd}: {exc.strerror}: {exc.filename}"
            report.line(f"{name}: FAILED: {record.reason}")
    state.save(state_dir)
    if head is not None:
        _wait_remote_head(state, report, startup_seconds)
    waited = [] if head is not None else ["(head)"]
    wait_for(state, [*waited, *[n for n, s in spec.servers.items() if s.launch]], report, startup_seconds, "/")
    instances = [
        {"name": n, "kind": r.kind, "host": r.host, "port": r.port, "url": f"http://{r.host}:{r.port}"}
        for n, r in state.servers.items()
        if r.ok
    ]
    (state_dir / "server_instances.json").write_text(json.dumps(instances, indent=2))
    if head is not None:
        head.publish(json.dumps(instances, indent=2))
    state.save(state_dir)
    return state


def _wait_remote_head(state: FleetState, report: Reporter, seconds: float) -> None:
    """Wait until a head server run elsewhere answers ``/``; no answer in time is recorded as its reason."""
    deadline = time.monotonic() + seconds
    report.status = "waiting for the head server"
    while not answers(state.head, "/"):
        if time.monotonic() > deadline:
            state.head.reason = f"no answer at / within {seconds:.0f} s"
            report.line(f"(head): FAILED: {state.head.reason}")
            return
        time.sleep(0.2)
    state.head.ok = True
    report.line(f"(head): up at http://{state.head.host}:{state.head.port}")


def _domain(record: ServerRecord) -> str | None:
    domain = _health(record).get("domain")
    return domain if isinstance(domain, str) else None


def stop_processes(state: FleetState, timeout: float = 10.0) -> list[str]:
    """Stop every process on this machine the state names (servers and their fronts first, the head server
    last); the names that were running."""
    stopped: list[str] = []
    threads = []
    for name, record in state.servers.items():
        if record.process is not None:
            proc = record.process

            def stop(name: str = name, proc: ProcessRecord = proc) -> None:
                if proc.stop(timeout):
                    stopped.append(name)

            threads.append(threading.Thread(target=stop))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fronts = [r.front for r in state.servers.values() if r.front is not None]
    for front in fronts:  # after their units: a request meanwhile is answered 503, not refused
        front.stop(timeout)
    if state.head.process is not None and state.head.process.stop(timeout):
        stopped.append("(head)")
    return sorted(stopped)


def _records(state: FleetState) -> list[ServerRecord]:
    return [state.head, *state.servers.values()]


def record_maker(state: FleetState, state_dir: Path, record: ServerRecord, log: Path) -> Callable[[Popen[bytes]], None]:
    """``ensure_venv``'s ``started``: each install command of an environment's virtualenv is recorded as its
    process (saved at once, Ctrl-C held back meanwhile), so ``ngym down`` stops it after ``up`` was killed in the
    middle of it; the server's own process replaces it once the venv is made."""

    def started(process: Popen[bytes]) -> None:
        with recorded(state, state_dir):
            record.process = ProcessRecord.started(process.pid, log)

    return started


def spawn_server(cmd: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> ProcessRecord:
    """Start a server of the fleet in a session of its own: ``down`` stops its whole group (uvicorn workers,
    sandboxes), and the fleet outlives the ``ngym up`` that started it."""
    proc = spawn(cmd, log, cwd=cwd, env=env)
    return ProcessRecord.started(proc.pid, log)


def _health(record: ServerRecord, path: str = "/health", timeout: float = 2.0) -> dict[str, object]:
    return fetch_json(f"http://{record.host}:{record.port}{path}", timeout) or {}


def port_taken(host: str, port: int) -> str:
    """Why a server cannot listen on ``host:port`` (something else does), or "" when it can. Checked before a
    server is started on a port the fleet file fixed: readiness is "anything answers there", which the other
    process would pass (a head server reported up at a port another server held, `ngym up` exiting 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no obstacle
        try:
            probe.bind((host, port))
        except OSError as exc:
            return f"cannot listen on {host}:{port}: {exc.strerror} (another process listens there)"
    return ""


def answers(record: ServerRecord, path: str) -> bool:
    """Any HTTP answer below 500 (NeMo Gym's own readiness poll takes any answer at all)."""
    status = status_of(f"http://{record.host}:{record.port}{path}")
    return status is not None and status < 500


def wait_for(state: FleetState, names: list[str], report: Reporter, seconds: float, path: str) -> None:
    """Wait until each named server answers, its process exits, or ``seconds`` pass; record each outcome."""
    records = {n: state.head if n == "(head)" else state.servers[n] for n in names}
    pending = {n for n, r in records.items() if r.process is not None and not r.reason}
    deadline = time.monotonic() + seconds
    while pending:
        report.status = f"{len(names) - len(pending)}/{len(names)} up; waiting for {', '.join(sorted(pending))}"
        for name in sorted(pending):
            record = records[name]
            assert record.process is not None
            if answers(record, path):
                record.ok = True
                pending.discard(name)
                report.line(f"{name}: up at http://{record.host}:{record.port}")
            elif not record.process.alive():
                record.reason = f"exited at start: {log_line(record.process.log)}"
                pending.discard(name)
                report.line(f"{name}: FAILED: {record.reason}")
        if pending and time.monotonic() > deadline:
            for name in pending:
                record, process = records[name], records[name].process
                assert process is not None  # pending holds only servers with a process
                record.reason = f"no answer at {path} within {seconds:.0f} s (log: {process.log})"
                report.line(f"{name}: FAILED: {record.reason}")
                process.stop()
            pending.clear()
        time.sleep(0.2)
    report.status = ""
