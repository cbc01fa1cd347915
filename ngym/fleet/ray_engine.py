"""The Ray engine: each environment's replicas placed on the nodes of a running Ray cluster, as detached actors.

Ray schedules and places (no scheduler of ngym's own): an environment's ``replicas`` are the bundles of one
placement group (strategy ``SPREAD``: on different nodes when Ray can), each bundle ``workers`` CPUs, each held by
an actor that starts the same ``ngym run TARGET --workers N`` unit on its node's address and a free port (in the
environment's own cached virtualenv when it names requirements or is a ``nemo-gym:`` entry). The unit dies with
its actor (``PR_SET_PDEATHSIG``): a node that is lost takes its replicas with it, never leaves one half alive.

The fleet's front actor on the head node (``ngym.fleet.ray_front``) puts a session-affine HAProxy in front of
each environment's replicas (one backend for one replica), and that is its one URL: a lost replica's rollouts end
as 410 / masked ``session_lost`` on a surviving replica, and an environment whose every replica is lost answers
503 at once (never a refused connection, which NeMo Gym's client retries without end), never a wrong reward. The front
also runs the head server, so nothing of the fleet runs where ``ngym up`` ran (except ``servers:`` entries).
Every unit gets ``RAY_ADDRESS``: an environment that runs Ray tasks (NeMo Gym's ``code_gen``) submits them to
this cluster. ``down`` stops and kills the actors by name (namespace ``ngym-fleet``), removes the placement groups,
then stops the local processes.

The cluster is yours: ``ray start --head`` on one machine, ``ray start --address=HEAD:6379`` on the others, then
``ray: {address: HEAD:6379}`` in the fleet file (or ``RAY_ADDRESS``). ngym (and HAProxy on the head node) must be
installed on every node.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ngym.errors import NgymError
from ngym.fleet.bringup import Reporter, answers, finish, new_state, stop_processes
from ngym.fleet.front import affinity_settings, client_limits
from ngym.fleet.isolation import ensure_venv
from ngym.fleet.launch import environment_args, environment_env
from ngym.fleet.spec import EnvironmentSpec, FleetSpec
from ngym.fleet.state import FleetState, ReplicaRecord, ServerRecord
from ngym.processes import spawn, stop
from ngym.server.sessions.cookies import SESSION_SECRET_ENV, secret_configured
from ngym.server.sessions.routing import ROUTE_SLOT_ENV

__all__ = ["Reporter", "down", "up"]

NAMESPACE = "ngym-fleet"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the actor's process dies (however it dies)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class EnvironmentHost:
    """The actor that holds one replica of an environment on its node (wrapped by ``ray.remote`` in :func:`up`)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None
        self.log = ""

    def start(
        self, argv: list[str], log_dir: str, lines: list[str] | None = None, env: dict[str, str] | None = None
    ) -> tuple[str, int, str]:
        """Start the unit on this node: in its own virtualenv when ``lines`` name requirements (made here, on
        the node, by :func:`ngym.fleet.isolation.ensure_venv`, and cached there), with ``env`` added."""
        import ray

        from ngym.child_server import free_port
        from ngym.fleet.isolation import ensure_venv

        host = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call,unused-ignore]
        os.makedirs(log_dir, exist_ok=True)
        stem = os.path.basename(argv[argv.index("run") + 1])  # the unit's target
        self.log = os.path.join(log_dir, f"{stem}-{os.getpid()}.log")
        python = sys.executable
        if lines:
            python = str(ensure_venv(lines, Path(log_dir) / f"{stem}-{os.getpid()}.venv.log"))
        port = free_port(host)
        command = [python, *argv, "--host", host, "--port", str(port)]
        # An environment that runs Ray tasks (NeMo Gym's code_gen: `@ray.remote` checks) joins this cluster, so
        # its tasks go to the cluster's CPUs on any node, not to a private Ray started inside its process.
        cluster = {"RAY_ADDRESS": ray.get_runtime_context().gcs_address}
        # cwd: not the Ray worker's (the folder `ray start` ran in): `python -m` puts it first on sys.path,
        # and a `resources_servers/` there would shadow a nemo-gym: entry's own package
        self.process = spawn(
            command,
            Path(self.log),
            cwd=log_dir,
            env={**os.environ, **cluster, **(env or {})},
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
        if self.process is not None:
            stop(self.process, grace=10)  # its whole process group: the unit leads one


def actor_name(fleet: str, env: str, replica: int | None = None) -> str:
    """The Ray name of an environment's actor (``FLEET/ENV``), or of one of its replicas (``FLEET/ENV#I``)."""
    return f"{fleet}/{env}" if replica is None else f"{fleet}/{env}#{replica}"


def check_reachable(address: str) -> None:
    """One clear error at once when nothing answers at a ``HOST:PORT`` Ray address: Ray's own client retries
    without end (``ngym up`` and ``ngym down`` printed Ray's warnings for minutes). ``auto`` and ``ray://`` addresses
    are left to Ray."""
    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            return
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise NgymError(
            f"no Ray cluster answers at {address} ({why}): start one there (ray start --head --port={port}), or "
            "name where one runs (ray: {address: HOST:PORT} in the fleet file, or RAY_ADDRESS)"
        ) from None


def _connect(address: str | None) -> Any:
    address = address or os.environ.get("RAY_ADDRESS") or "auto"
    try:
        import ray
    except ImportError:
        raise NgymError("the ray engine needs Ray: pip install 'ngym[ray]' (or `ray>=2.40`) on every node") from None
    if not ray.is_initialized():
        check_reachable(address)
        # ray.init replaces the caller's SIGTERM handler with one that exits at once (`ngym up`'s turns SIGTERM
        # into the clean-up Ctrl-C gets): the caller's is put back
        main = threading.current_thread() is threading.main_thread()
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)} if main else {}
        try:
            ray.init(
                address=address,
                namespace=NAMESPACE,
                log_to_driver=False,
                logging_level=logging.WARNING,  # not Ray's "Connecting to existing Ray cluster" lines
            )
        finally:
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)
    return ray


class _Front:
    """The front actor seen from ``finish``: it runs the head server (:class:`ngym.fleet.bringup.RemoteHead`)."""

    def __init__(self, ray: Any, actor: Any) -> None:
        self.ray, self.actor = ray, actor

    def start(self, config_text: str) -> None:
        self.ray.get(self.actor.start_head.remote(config_text), timeout=60)

    def publish(self, instances_json: str) -> None:
        self.ray.get(self.actor.publish.remote(instances_json), timeout=60)


def _say(report: Reporter, name: str) -> Callable[[str], None]:
    return lambda message: report.line(f"{name}: {message}")


def _cause(exc: Exception) -> str:
    """What an actor raised (a RayTaskError wraps it with a traceback; the user needs its one line)."""
    cause = getattr(exc, "cause", None)
    return str(cause if isinstance(cause, Exception) else exc).strip().splitlines()[-1][:500]


def up(spec: FleetSpec, reporter: Reporter | None = None, startup_seconds: float = 180.0) -> FleetState:
    """Place every environment's replicas on the cluster (spread over nodes), put an affinity HAProxy in front
    of each environment, wait for each to answer, then start the head server (both on the head node, in the
    front actor) and the other servers (here)."""
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from ngym.fleet.ray_front import FRONT, HEAD_NODE_RESOURCE, FleetFront

    report = reporter or Reporter()
    address = spec.ray.get("address") or os.environ.get("RAY_ADDRESS") or "auto"
    ray = _connect(address)
    state = new_state(spec, "ray")
    state.project, state.ray_address = NAMESPACE, address
    host_cls = ray.remote(EnvironmentHost)
    log_dir = str(spec.state_dir() / "logs" / "ray")
    # the front: on the head node (the resource only it has), no CPU
    front = (
        ray.remote(FleetFront)
        .options(
            name=actor_name(spec.name, FRONT),
            lifetime="detached",
            num_cpus=0,
            resources={HEAD_NODE_RESOURCE: 0.001},
            max_restarts=0,
        )
        .remote()
    )
    # saved before every wait on the cluster: Ctrl-C or SIGTERM during a wait (a placement Ray cannot make yet
    # waits up to startup_seconds) leaves `up`'s clean-up, and `ngym down`, every actor and group to remove
    state.head.service = actor_name(spec.name, FRONT)
    state.save(spec.state_dir())
    try:
        state.head.host, state.head.port = ray.get(
            front.reserve.remote("(head)", int(spec.head_server.get("port", 11000))), timeout=startup_seconds
        )
    except Exception as exc:
        with contextlib.suppress(Exception):
            ray.kill(front)  # a detached actor: nothing else would ever stop it
        raise NgymError(f"the fleet's front (head server) could not start on the head node: {_cause(exc)}") from None
    placed: dict[tuple[str, int], Any] = {}
    actors: dict[tuple[str, int], Any] = {}
    for name, env in spec.environments.items():
        record = state.servers[name] = ServerRecord(
            kind="environment", host="", port=0, workers=env.workers, service=actor_name(spec.name, name)
        )
        extra: dict[str, str] = {}
        if env.replicas > 1 and not env.config.get("session_secret") and not secret_configured():
            # one secret for all replicas: a rollout whose replica is lost reaches another that reads its cookie
            # and answers session_lost (masked), not a fresh session
            extra[SESSION_SECRET_ENV] = secrets.token_urlsafe(32)
        extra.update(environment_env(env))  # its secret overrides: never on a command line
        lines = env.isolation_key(spec.base_dir, name)
        if lines:
            # Made here first, in the venv cache: nodes that share it (a shared filesystem) find it ready, so
            # nodes need no package index; a node that does not share it makes its own (ensure_venv, on the node)
            report.status = f"{name}: virtualenv"
            try:
                ensure_venv(lines, spec.state_dir() / "logs" / f"{name}.venv.log", _say(report, name))
            except NgymError as exc:
                record.reason = str(exc)
                report.line(f"{name}: FAILED: {exc}")
                continue
        argv = environment_args(spec, env, name)  # host and port are the node's, chosen by the actor
        # Ray places: the replicas' CPUs as one placement group spread over the nodes (best effort: on fewer
        # nodes than replicas, some share one)
        state.save(spec.state_dir())  # its group, by the name record.service, from the next line on
        group = placement_group(
            [{"CPU": env.workers}] * env.replicas, strategy="SPREAD", name=record.service, lifetime="detached"
        )
        for i in range(env.replicas):
            key = (name, i)
            actors[key] = host_cls.options(
                name=actor_name(spec.name, name, i),
                lifetime="detached",
                num_cpus=env.workers,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i),
                max_restarts=0,
            ).remote()
            # replica I is routing slot I of the environment's replicas: the session ids it makes route back to it
            slot = {ROUTE_SLOT_ENV: f"{i}/{env.replicas}"} if env.replicas > 1 else {}
            placed[key] = actors[key].start.remote(argv, log_dir, lines, {**extra, **slot})
            record.replicas.append(ReplicaRecord(host="", port=0, actor=actor_name(spec.name, name, i)))
        state.save(spec.state_dir())  # its placement group and actors exist from here
    report.status = f"placing {len(placed)} replica(s) on the cluster"
    for (name, i), ref in placed.items():
        replica = state.servers[name].replicas[i]
        try:
            replica.host, replica.port, replica.node = ray.get(ref, timeout=startup_seconds)
        except Exception as exc:  # placement failed or timed out (no node with the CPUs): named, the others go on
            replica.reason = f"not placed on the cluster: {_cause(exc)}"
            report.line(f"{name}#{i}: FAILED: {replica.reason}")
    state.save(spec.state_dir())
    _wait_replicas(ray, state, actors, report, startup_seconds, log_dir)
    for name, env in spec.environments.items():
        _front_environment(ray, front, state.servers[name], env, name, report)
    state.save(spec.state_dir())
    # NeMo Gym's servers with `ray_enabled` (started from `servers:`) join this cluster too: initialize_ray()
    # reads the address from the global config instead of starting a Ray of their own
    # (`ray: {servers_address: ...}` names another: Ray refuses a client of another Python or Ray version, and
    # NeMo Gym's servers often run in NeMo's own venv)
    servers_ray = spec.ray.get("servers_address") or ray.get_runtime_context().gcs_address
    cluster = {"ray_head_node_address": servers_ray}
    return finish(spec, state, report, startup_seconds, head=_Front(ray, front), extra_config=cluster)


def _wait_replicas(
    ray: Any, state: FleetState, actors: dict[tuple[str, int], Any], report: Reporter, seconds: float, log_dir: str
) -> None:
    """Wait until each placed replica answers ``/health`` or its unit exits; record each outcome."""
    deadline = time.monotonic() + seconds
    pending = {key for key in actors if state.servers[key[0]].replicas[key[1]].port}
    while pending and time.monotonic() < deadline:
        report.status = f"waiting for {', '.join(f'{n}#{i}' for n, i in sorted(pending))}"
        for name, i in sorted(pending):
            replica = state.servers[name].replicas[i]
            failure = ray.get(actors[name, i].failure.remote(), timeout=30)
            if failure:
                replica.reason = failure
                pending.discard((name, i))
                report.line(f"{name}#{i}: FAILED: {failure}")
            elif answers(ServerRecord(kind="environment", host=replica.host, port=replica.port), "/health"):
                replica.ok = True
                pending.discard((name, i))
        time.sleep(0.3)
    for name, i in pending:
        replica = state.servers[name].replicas[i]
        replica.reason = f"no answer at /health within {seconds:.0f} s (logs: {log_dir} on its node)"
        report.line(f"{name}#{i}: FAILED: {replica.reason}")


def _front_environment(
    ray: Any, front: Any, record: ServerRecord, env: EnvironmentSpec, name: str, report: Reporter
) -> None:
    """Give the environment its one URL: the front's HAProxy over the replicas that came up (a replica that did
    not is named; the environment fails only when none came up)."""
    up = [r for r in record.replicas if r.ok]
    # every replica keeps its slot in HAProxy (one that did not come up as a disabled server): a session id
    # routes to the replica numbered by its hash, so the numbering cannot shift
    slots = [(r.host or "127.0.0.1", r.port or 1, not r.ok) for r in record.replicas]
    if not up:
        record.reason = "; ".join(r.reason for r in record.replicas if r.reason) or "no replica came up"
        report.line(f"{name}: FAILED: {record.reason}")
        return
    nodes = ", ".join(sorted({r.node[:12] for r in up}))
    # One replica too is reached through the front's HAProxy, never at its node's address: when its node dies,
    # HAProxy answers 503 at once, and an HTTP answer ends the request. A refused or unreachable address does
    # not: NeMo Gym 0.7.0's client (server_utils._request_with_retries) retries a connection error without end,
    # so its collector would wait forever for the rows of a dead node's environment.
    try:
        record.host, record.port = ray.get(front.reserve.remote(name, env.port or 0), timeout=60)
        cookie, ttl, cap = affinity_settings(env)
        ray.get(front.route.remote(name, slots, cookie, ttl, cap, client_limits(env)), timeout=60)
    except Exception as exc:
        record.reason = f"its HAProxy on the head node did not start: {_cause(exc)}"
        report.line(f"{name}: FAILED: {record.reason}")
        return
    record.reason = f"{len(up)}/{env.replicas} replica(s) on ray node(s) {nodes}, behind HAProxy on the head node"
    if answers(record, "/health") or _answers_soon(record):
        record.ok = True
        report.line(f"{name}: up at http://{record.host}:{record.port} ({record.reason})")
    else:
        record.reason = f"no answer at /health at http://{record.host}:{record.port}"
        report.line(f"{name}: FAILED: {record.reason}")


def _answers_soon(record: ServerRecord, seconds: float = 15.0) -> bool:
    """HAProxy's first health checks take a moment: until they pass it has no backend to send a request to."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if answers(record, "/health"):
            return True
        time.sleep(0.2)
    return False


def down(state: FleetState, timeout: float = 10.0, address: str | None = None) -> list[str]:
    """Stop and kill every actor of the fleet (replicas, then the front with the head server), remove its
    placement groups, then stop its local processes."""
    ray = _connect(address or state.ray_address or None)
    stopped = []
    for name, record in state.servers.items():
        if record.kind != "environment" or not record.service:
            continue
        names = [r.actor for r in record.replicas] or [record.service]  # a state from before replicas
        # a replica never placed (an `up` interrupted while Ray waited for the resources) runs nothing to stop
        unplaced = {r.actor for r in record.replicas if not r.port}
        if _stop_actor(ray, names, timeout, unplaced):
            stopped.append(name)
        with contextlib.suppress(Exception):
            ray.util.remove_placement_group(ray.util.get_placement_group(record.service))
    if state.head.service and _stop_actor(ray, [state.head.service], timeout):
        stopped.append("(head)")
    return sorted([*stopped, *stop_processes(state, timeout)])


def _stop_actor(ray: Any, names: list[str], timeout: float, unplaced: set[str] | None = None) -> bool:
    """Stop (then kill) the named actors that still exist; True if any did. Those in ``unplaced`` are killed at
    once (an actor waiting for its resources would never answer ``stop``)."""
    found = False
    for actor_id in names:
        try:
            actor = ray.get_actor(actor_id, namespace=NAMESPACE)
        except ValueError:  # gone already (its node died, or killed)
            continue
        found = True
        if actor_id not in (unplaced or set()):
            with contextlib.suppress(Exception):
                ray.get(actor.stop.remote(), timeout=timeout)
        ray.kill(actor)
    return found
