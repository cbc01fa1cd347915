"""Hosts as network namespaces on one bridge, and a real Ray cluster on them (``ray start`` per host).

Shared by the cluster tests (each with its own prefix and subnet, so two can run at once): a host ``NAME`` is a
namespace ``PREFIX-hI`` with a veth on the bridge ``PREFIX-br`` at ``SUBNET.1I``; the machine itself is
``SUBNET.1``. Every node is ``ray start --block`` in its host's namespace and its own process group, so killing a
node kills its raylet and everything Ray started on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

RAY = str(Path(sys.executable).with_name("ray"))
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
#: set (to the hosts' prefix) in the environment of every process a cluster test starts: its descendants inherit
#: it whatever session or process group they make, so ``Hosts.drop`` finds those outside the namespaces too
#: (a ``servers:`` entry ``ngym up`` started here, when the test was killed before ``ngym down``)
MARKER = "NGYM_TEST_HOSTS"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sh(*command: str) -> None:
    subprocess.run(command, check=False, capture_output=True)


class Hosts:
    """Namespaces ``PREFIX-h0..`` on a bridge; ``make`` is idempotent, ``drop`` removes them and their
    processes (also run before ``make``: a run killed outright, whose cleanup never ran, leaves nothing)."""

    def __init__(self, prefix: str, subnet: str, names: list[str]) -> None:
        self.prefix, self.subnet = prefix, subnet
        self.index = {name: i for i, name in enumerate(names)}
        self.bridge = f"{prefix}-br"

    @property
    def env(self) -> dict[str, str]:
        """The environment for every process the test starts (``ngym``, ``ray start``): marked as this test's."""
        return {**ENV, MARKER: self.prefix}

    def marked(self) -> list[int]:
        """Processes carrying this test's mark (started by it, or by what it started), this one excluded."""
        mark = f"{MARKER}={self.prefix}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
        return found

    def namespace(self, name: str) -> str:
        return f"{self.prefix}-h{self.index[name]}"

    def ip(self, name: str) -> str:
        return f"{self.subnet}.1{self.index[name]}"

    def make(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        # Docker's FORWARD policy would drop bridged traffic between the namespaces (br_netfilter): allow it
        sh("iptables", "-I", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")
        for i in self.index.values():
            ns, outer, inner = f"{self.prefix}-h{i}", f"{self.prefix}-v{i}", f"{self.prefix}-p{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "link", "set", outer, "master", self.bridge)
            sh("ip", "link", "set", outer, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.subnet}.1{i}/24", "dev", inner)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", f"{self.subnet}.1")

    def pids(self, name: str) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.namespace(name)], capture_output=True, text=True).stdout
        return [int(pid) for pid in out.split()]

    def drop(self) -> None:
        for pid in self.marked():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for name in self.index:
            for pid in self.pids(name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            sh("ip", "netns", "del", self.namespace(name))
            sh("ip", "link", "del", f"{self.prefix}-v{self.index[name]}")
        sh("iptables", "-D", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")
        sh("ip", "link", "del", self.bridge)


class Cluster:
    """A Ray head on host ``head`` and worker nodes on the others, each ``ray start --block`` in its own
    namespace and process group. ``nodes`` maps each worker host to its ``ray start`` arguments (CPUs,
    resources); each worker also gets the resource ``PREFIXNAME: 1`` so a test can tell which node is which."""

    def __init__(self, hosts: Hosts, nodes: dict[str, list[str]]) -> None:
        self.hosts, self.node_args = hosts, nodes
        self.temp = tempfile.mkdtemp(prefix=f"{hosts.prefix}-ray-", dir="/tmp")  # short: Ray's socket paths
        self.port = free_port()
        self.address = f"{hosts.ip('head')}:{self.port}"
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}

    def marker(self, name: str) -> str:
        return f"{self.hosts.prefix.replace('-', '')}{name}"

    def start(self, name: str, *args: str) -> None:
        log = open(Path(self.temp) / f"{name}.log", "ab")  # noqa: SIM115 (closed with the process)
        common = [f"--node-ip-address={self.hosts.ip(name)}", f"--temp-dir={self.temp}", "--block"]
        self.nodes[name] = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts.namespace(name), RAY, "start", *args, *common, "--disable-usage-stats"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.hosts.env,
            start_new_session=True,
        )

    def up(self) -> None:
        self.start("head", "--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false")
        self.wait(1)
        for count, (name, args) in enumerate(self.node_args.items(), start=2):
            # one at a time: two raylets starting at once on one address race for their ports
            self.start(name, f"--address={self.address}", *args, f'--resources={{"{self.marker(name)}": 1}}')
            self.wait(count)

    def alive_nodes(self) -> list[dict[str, Any]]:
        code = "import ray, json; ray.init(address='%s', log_to_driver=False); print(json.dumps(ray.nodes()))"
        out = subprocess.run([sys.executable, "-c", code % self.address], env=ENV, capture_output=True, text=True)
        try:
            return [n for n in json.loads(out.stdout.strip().splitlines()[-1]) if n["Alive"]]
        except (ValueError, IndexError):
            return []

    def host_of_nodes(self) -> dict[str, str]:
        """Ray node id -> host name, for the worker nodes alive now."""
        return {
            n["NodeID"]: next(name for name in self.node_args if self.marker(name) in n["Resources"])
            for n in self.alive_nodes()
            if any(self.marker(name) in n["Resources"] for name in self.node_args)
        }

    def wait(self, count: int) -> None:
        deadline = time.monotonic() + 120
        while len(self.alive_nodes()) < count:
            assert time.monotonic() < deadline, f"the Ray cluster did not reach {count} node(s): see {self.temp}"
            time.sleep(1)

    def kill(self, name: str) -> None:
        os.killpg(self.nodes[name].pid, signal.SIGKILL)
        self.nodes[name].wait()

    def stop(self) -> None:
        for process in self.nodes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        shutil.rmtree(self.temp, ignore_errors=True)


@contextlib.contextmanager
def ray_cluster(hosts: Hosts, nodes: dict[str, list[str]]) -> Iterator[Cluster]:
    """Hosts made (what a killed earlier run left removed first), a cluster up on them; both gone after."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.fail("the Ray cluster tests need root and iproute2 (network namespaces)")
    hosts.drop()
    hosts.make()
    made = Cluster(hosts, nodes)
    try:
        made.up()
        yield made
    finally:
        made.stop()
        hosts.drop()
