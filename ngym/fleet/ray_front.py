"""The Ray engine's front: the fleet's head server and one HAProxy per environment, as one Ray actor
on the cluster's head node.

Why an actor on the head node, not processes where ``ngym up`` ran: the fleet then lives and dies with its
cluster. ``ngym up`` may run anywhere (a laptop, a login node, a test that is killed outright) and exit; nothing
of the fleet is left on that machine, and a cluster torn down takes every part of the fleet with it (each
process the actor starts gets ``SIGKILL`` when the actor dies, ``PR_SET_PDEATHSIG``). The head node is the one
node whose loss ends the cluster anyway, so the front adds no new single point of failure; it reserves no CPU.

Each environment's one stable URL is an HAProxy configured by :func:`ngym.server.hosting.haproxy.haproxy_config`
(the same stateless session-affine rules as ``ngym run --workers N``: replica I is routing slot I, and a request
goes to the slot its session id hashes to): a rollout's requests reach the replica that seeded it, and wait for it
when it is slow; a replica that fails its ``/livez`` check gets no new seed, and once its connection fails (its
node is lost) its rollouts' requests go to a replica that does not hold them, which masks their verifies
``session_lost`` and answers their tool calls 410 — loud, never a wrong reward. With no
replica left (one replica, its node lost) HAProxy answers 503 at once: an HTTP answer ends a client's request, where
a dead node's address would be retried without end by NeMo Gym's client. HAProxy must be installed on the head
node (``apt-get install haproxy``).
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from ngym.child_python import python_module
from ngym.fleet.state import write_private
from ngym.processes import spawn, stop_all
from ngym.server.hosting.client_limits import ClientLimits
from ngym.server.hosting.haproxy import Backend, haproxy_binary, haproxy_command, haproxy_config

__all__ = ["FRONT", "FleetFront", "HEAD_NODE_RESOURCE"]

#: the actor's name suffix: ``FLEET/(front)`` in the engine's Ray namespace
FRONT = "(front)"
#: the resource Ray gives only its head node (``ray._private.ray_constants.HEAD_NODE_RESOURCE_NAME``)
HEAD_NODE_RESOURCE = "node:__internal_head__"
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the actor's process dies (however it dies)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class FleetFront:
    """The actor (wrapped by ``ray.remote`` in ``ngym.fleet.ray_engine``): starts, watches and stops the front
    processes on its node. Its files (the served global config, HAProxy's configs, logs) are in its own
    temporary folder on that node: the machine that ran ``ngym up`` need not share a filesystem with it."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ngym-fleet-front-"))
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.sockets: dict[str, socket.socket] = {}

    def host(self) -> str:
        """This node's address (where every front process listens)."""
        import ray

        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call,unused-ignore]

    def reserve(self, name: str, port: int = 0) -> tuple[str, int]:
        """Bind ``name``'s listening socket now (``port`` 0: any free one), so its address is known and kept
        before its process starts (HAProxy inherits the socket; the head server rebinds it)."""
        host = self.host()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        self.sockets[name] = sock
        return host, int(sock.getsockname()[1])

    def route(
        self,
        name: str,
        backends: list[tuple[str, int]] | list[tuple[str, int, bool]],
        cookie_name: str,
        session_ttl_seconds: float,
        max_sessions: int,
        limits: ClientLimits = ClientLimits(),
    ) -> None:
        """Start HAProxy for environment ``name`` on its reserved socket, session-affine over ``backends``
        (backend ``rI`` is replica I, routing slot I: HAProxy's ``X-Ngym-Worker`` answer header names it; a third
        item true marks a replica that did not come up, kept disabled so the slots stay numbered)."""
        binary = haproxy_binary()
        sock = self.sockets[name]
        sock.listen(1024)
        sock.set_inheritable(True)
        config = self.dir / f"{name}.haproxy.cfg"
        config.write_text(
            haproxy_config(
                listen_fd=sock.fileno(),
                backends=[
                    Backend(f"r{i}", str(b[0]), int(b[1]), disabled=bool(b[2]) if len(b) > 2 else False)
                    for i, b in enumerate(backends)
                ],
                cookie_name=cookie_name,
                session_ttl_seconds=session_ttl_seconds,
                max_sessions=max_sessions,
                limits=limits,
            )
        )
        check = subprocess.run(
            [binary, "-c", "-q", "-f", str(config)], pass_fds=(sock.fileno(),), capture_output=True, text=True
        )
        if check.returncode != 0:
            raise RuntimeError(f"HAProxy refused ngym's configuration: {check.stderr.strip() or check.stdout.strip()}")
        self._spawn(name, haproxy_command(binary, str(config)), pass_fds=(sock.fileno(),))

    def start_head(self, config_text: str) -> None:
        """Start the head server on its reserved address, serving ``config_text`` as the global config."""
        write_private(self.dir / "global_config.yaml", config_text)  # served redacted by the head server
        sock = self.sockets.pop("(head)")
        host, port = sock.getsockname()[:2]
        sock.close()  # uvicorn binds its own (a listening socket was never made of it: no TIME_WAIT to wait out)
        self._spawn(
            "(head)",
            python_module(
                "ngym.fleet.head",
                str(self.dir / "global_config.yaml"),
                str(self.dir / "server_instances.json"),
                str(host),
                str(port),
            ),
        )

    def publish(self, instances_json: str) -> None:
        """The head server's ``/server_instances`` (it rereads the file on each request)."""
        tmp = self.dir / "server_instances.json.tmp"
        tmp.write_text(instances_json)
        tmp.replace(self.dir / "server_instances.json")

    def failures(self) -> dict[str, str]:
        """Each front process that stopped, with its exit code and the last line of its log."""
        out = {}
        for name, process in self.processes.items():
            if process.poll() is not None:
                lines = (self.dir / f"{name}.log").read_text(errors="replace").strip().splitlines() or ["(empty)"]
                out[name] = f"exited ({process.returncode}): {lines[-1][:300]}"
        return out

    def stop(self) -> None:
        """Stop every front process (SIGTERM, then SIGKILL after 10 s) and remove the folder."""
        stop_all(list(self.processes.values()), grace=10)
        for sock in self.sockets.values():
            sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _spawn(self, name: str, command: list[str], pass_fds: tuple[int, ...] = ()) -> None:
        self.processes[name] = spawn(
            command,
            self.dir / f"{name}.log",
            pass_fds=pass_fds,
            new_session=False,
            preexec_fn=_die_with_parent,  # the point: nothing outlives the actor
        )
        if pass_fds:  # HAProxy holds the socket now
            with contextlib.suppress(KeyError):
                self.sockets.pop(name).close()
