"""The Ray engine: each environment placed on a node of a running Ray cluster, as a detached Ray actor.

Ray schedules and places (no scheduler of ngym's own): each environment is one actor reserving ``workers`` CPUs,
spread over the cluster's nodes (``scheduling_strategy="SPREAD"``). The actor starts the same
``ngym run TARGET --workers N`` unit on its node, on the node's address and a free port, and reports where it
listens; that address goes into the global config. The unit dies with its actor (``PR_SET_PDEATHSIG``): a node
that is lost takes its environments with it, never leaves one half alive, and clients of those get connection
errors, never a reward from another process. The head server and any NeMo Gym servers run on the machine that
ran ``ngym up`` (``ngym.fleet.local.finish``). ``down`` stops and kills the actors by name (namespace
``ngym-fleet``), then the local processes.

An environment that needs its own virtualenv (``nemo-gym:NAME``, ``requirements``) gets it on the node that
holds it: the actor makes (or reuses) it with the same cache and key as the local engine, before it starts the
unit, so environments whose requirements conflict share a cluster as they share a machine.

The cluster is yours: ``ray start --head`` on one machine, ``ray start --address=HEAD:6379`` on the others, then
``ray: {address: HEAD:6379}`` in the fleet file (or ``RAY_ADDRESS``). ngym must be installed on every node.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ngym.errors import NgymError
from ngym.fleet.isolation import ensure_venv
from ngym.fleet.launch import environment_args
from ngym.fleet.local import Reporter, answers, finish, new_state
from ngym.fleet.local import down as local_down
from ngym.fleet.spec import FleetSpec
from ngym.fleet.state import FleetState, ServerRecord

__all__ = ["Reporter", "down", "up"]

NAMESPACE = "ngym-fleet"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the actor's process dies (however it dies)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class EnvironmentHost:
    """The actor that holds one environment unit on its node (wrapped by ``ray.remote`` in :func:`up`)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.log = ""

    def start(self, argv: list[str], log_dir: str, lines: list[str] | None = None) -> tuple[str, int, str]:
        """Start the unit on this node (in the virtualenv holding ``lines`` when given): (host, port, node id)."""
        import ray

        from ngym.child_server import free_port

        host = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call,unused-ignore]
        os.makedirs(log_dir, exist_ok=True)
        self.log = os.path.join(log_dir, f"{os.path.basename(argv[3])}-{os.getpid()}.log")
        python = sys.executable
        if lines:
            # on this node: a cluster's nodes do not share ngym up's disk (NgymError names pip's log)
            python = str(ensure_venv(lines, Path(self.log).with_suffix(".venv.log")))
        port = free_port(host)
        command = [python, *argv, "--host", host, "--port", str(port)]
        with open(self.log, "ab") as out:
            # cwd: not the Ray worker's (the folder `ray start` ran in): `python -m` puts it first on sys.path,
            # and a `resources_servers/` there shadows the environment's own package (a nemo-gym: entry's venv)
            self.process = subprocess.Popen(
                command,
                cwd=log_dir,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return host, port, ray.get_runtime_context().get_node_id()

    def failure(self) -> str:
        """ "" while the unit runs, else why it stopped (the last error line of its log, on its node)."""
        if self.process is None or self.process.poll() is None:
            return ""
        try:
            with open(self.log, errors="replace") as handle:
                lines = [line.strip() for line in handle if line.strip()]
        except OSError:
            lines = []
        errors = [line for line in lines if "error" in line.lower()] or lines or ["(empty log)"]
        return f"exited ({self.process.returncode}): {errors[-1][:300]} (log on its node: {self.log})"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


def actor_name(fleet: str, env: str) -> str:
    return f"{fleet}/{env}"


def _connect(address: str | None) -> Any:
    try:
        import ray
    except ImportError:
        raise NgymError("the ray engine needs Ray: pip install 'ngym[ray]' (or `ray>=2.40`) on every node") from None
    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or "auto",
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level=logging.WARNING,  # not Ray's "Connecting to existing Ray cluster" lines
        )
    return ray


def up(spec: FleetSpec, reporter: Reporter | None = None, startup_seconds: float = 180.0) -> FleetState:
    """Place every environment on the cluster, wait for each to answer, then the head server and other servers."""
    report = reporter or Reporter()
    address = spec.ray.get("address") or os.environ.get("RAY_ADDRESS") or "auto"
    ray = _connect(address)
    state = new_state(spec, "ray")
    state.project, state.ray_address = NAMESPACE, address
    host_cls = ray.remote(EnvironmentHost)
    log_dir = str(spec.state_dir() / "logs" / "ray")
    placed: dict[str, Any] = {}
    actors: dict[str, Any] = {}
    for name, env in spec.environments.items():
        if env.replicas > 1:
            reason = "the ray engine runs one replica per environment"
            state.servers[name] = ServerRecord(kind="environment", host="", port=0, reason=reason)
            report.line(f"{name}: FAILED: {reason} (use workers: N, or the local/compose engine)")
            continue
        # host and port are the node's, chosen by the actor; `name`: a nemo-gym entry is installed under it
        argv = environment_args(spec, env, name)
        lines = env.isolation_key(spec.base_dir, name)
        actor = host_cls.options(
            name=actor_name(spec.name, name),
            lifetime="detached",
            num_cpus=env.workers,
            scheduling_strategy="SPREAD",
            max_restarts=0,
        ).remote()
        actors[name], placed[name] = actor, actor.start.remote(argv, log_dir, lines)
        state.servers[name] = ServerRecord(
            kind="environment", host="", port=0, workers=env.workers, service=actor_name(spec.name, name)
        )
    report.status = f"placing {len(placed)} environment(s) on the cluster"
    for name, ref in placed.items():
        record = state.servers[name]
        try:
            record.host, record.port, node = ray.get(ref, timeout=startup_seconds)
            record.reason = f"ray node {node[:12]}"
        except Exception as exc:  # placement failed or timed out (no node with the CPUs): named, the others go on
            cause = getattr(exc, "cause", None)  # a RayTaskError wraps the actor's own error (e.g. a failed venv)
            record.reason = f"not started on the cluster: {cause if isinstance(cause, NgymError) else exc}"
            report.line(f"{name}: FAILED: {record.reason}")
    state.save(spec.state_dir())
    deadline = time.monotonic() + startup_seconds
    pending = {n for n in placed if state.servers[n].port}
    while pending and time.monotonic() < deadline:
        report.status = f"waiting for {', '.join(sorted(pending))}"
        for name in sorted(pending):
            failure = ray.get(actors[name].failure.remote(), timeout=30)
            if failure:
                state.servers[name].reason = failure
                pending.discard(name)
                report.line(f"{name}: FAILED: {failure}")
            elif answers(state.servers[name], "/health"):
                state.servers[name].ok = True
                pending.discard(name)
                record = state.servers[name]
                report.line(f"{name}: up at http://{record.host}:{record.port} ({record.reason})")
        time.sleep(0.3)
    for name in pending:
        state.servers[
            name
        ].reason = f"no answer at /health within {startup_seconds:.0f} s (logs: {log_dir} on its node)"
        report.line(f"{name}: FAILED: {state.servers[name].reason}")
    return finish(spec, state, report, startup_seconds)


def down(state: FleetState, timeout: float = 10.0, address: str | None = None) -> list[str]:
    """Stop and kill every environment actor of the fleet, then its local processes."""
    ray = _connect(address or state.ray_address or None)
    stopped = []
    for name, record in state.servers.items():
        if record.kind != "environment" or not record.service:
            continue
        try:
            actor = ray.get_actor(record.service, namespace=NAMESPACE)
        except ValueError:  # gone already (its node died, or killed)
            continue
        with contextlib.suppress(Exception):
            ray.get(actor.stop.remote(), timeout=timeout)
        ray.kill(actor)
        stopped.append(name)
    return sorted([*stopped, *local_down(state, timeout)])
