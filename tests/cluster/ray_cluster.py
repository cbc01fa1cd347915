"""A real Ray cluster for the cluster tests: a head and worker nodes, each ``ray start --block`` on its own host.

The hosts are network namespaces (:mod:`tests.netns`); the head reserves no CPUs, so Ray places every
environment on a worker node, and each worker node carries a custom resource ``<prefix>node<i>`` so a test can
tell which node Ray chose. Needs ``pip install 'ngym[ray]'`` (``make fleet-ray`` installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.netns import Hosts

RAY = str(Path(sys.executable).with_name("ray"))
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """``ray start --head`` on host ``head`` and a worker node on each other host named ``node<i>``."""

    def __init__(self, hosts: Hosts, workers: int = 2, cpus_per_worker: int = 1) -> None:
        self.hosts, self.workers, self.cpus = hosts, workers, cpus_per_worker
        # what a run killed outright left of its cluster's files (its hosts and processes went with hosts.make())
        for stale in Path("/tmp").glob(f"{hosts.prefix}ray-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.temp = tempfile.mkdtemp(prefix=f"{hosts.prefix}ray-", dir="/tmp")  # short: Ray's unix socket paths
        self.port = free_port()
        self.address = f"{hosts.address('head')}:{self.port}"
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, *args: str) -> None:
        log = open(Path(self.temp) / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        ip = self.hosts.address(name)
        common = [f"--node-ip-address={ip}", f"--temp-dir={self.temp}", "--block", "--disable-usage-stats"]
        self.nodes[name] = subprocess.Popen(
            [*self.hosts.exec_argv(name), RAY, "start", *args, *common],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=ENV,
            start_new_session=True,
        )

    def up(self) -> None:
        self.start("head", "--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false")
        self.wait(1)
        for i in range(1, self.workers + 1):  # one at a time: two raylets starting at once race for ports
            resources = json.dumps({self.resource(i): 1})
            self.start(f"node{i}", f"--address={self.address}", f"--num-cpus={self.cpus}", f"--resources={resources}")
            self.wait(1 + i)

    def resource(self, i: int) -> str:
        return f"{self.hosts.prefix.replace('-', '')}node{i}"

    def alive_nodes(self) -> list[dict[str, Any]]:
        code = "import ray, json; ray.init(address='%s', log_to_driver=False); print(json.dumps(ray.nodes()))"
        out = subprocess.run([sys.executable, "-c", code % self.address], env=ENV, capture_output=True, text=True)
        try:
            return [n for n in json.loads(out.stdout.strip().splitlines()[-1]) if n["Alive"]]
        except (ValueError, IndexError):
            return []

    def holders(self, placed: dict[str, str]) -> dict[str, str]:
        """Which worker host (``node<i>``) holds each name of ``placed`` (name -> a prefix of its Ray node id)."""
        which = {
            nid: next(f"node{i}" for i in range(1, self.workers + 1) if self.resource(i) in n["Resources"])
            for nid, n in ((n["NodeID"], n) for n in self.alive_nodes())
            if "CPU" in n["Resources"]
        }
        return {name: next(w for nid, w in which.items() if nid.startswith(p)) for name, p in placed.items()}

    def wait(self, count: int) -> None:
        deadline = time.monotonic() + 120
        while len(self.alive_nodes()) < count:
            assert time.monotonic() < deadline, f"the Ray cluster did not reach {count} node(s): see {self.temp}"
            time.sleep(1)

    def kill(self, name: str) -> None:
        """The node's ``ray start`` process group SIGKILLed (what it started in other groups dies with it)."""
        os.killpg(self.nodes[name].pid, signal.SIGKILL)
        self.nodes[name].wait()

    def stop(self) -> None:
        for process in self.nodes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(self.temp, ignore_errors=True)
