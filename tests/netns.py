"""Hosts for multi-host tests: network namespaces joined by veth pairs on one bridge (needs root and iproute2).

Each host is a namespace ``PREFIX-NAME`` with one veth on the bridge ``PREFIX-br`` and the address
``SUBNET.1X`` (X: the host's index); this namespace (the "machine") is ``SUBNET.1`` and every host's default
route, so a process in a host reaches the others and the machine, and the machine reaches every host. A host
dies as a machine dies: :meth:`Hosts.kill` SIGKILLs every process in its namespace.

:meth:`Hosts.drop` runs before the hosts are made too, and removes every namespace of the prefix with its
processes: a run killed outright (its ``finally`` never ran) leaves nothing to the next one.

:meth:`Hosts.for_this_run` gives a run a prefix and a subnet of its own instead of fixed ones, so two runs of one
test at once (two checkouts, two engineers) never remove each other's namespaces: each holds a lease (a file in
``LEASES`` naming its process) while its hosts exist, and a run removes only its own hosts and those of leases
whose process is gone (a run killed outright).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import string
import subprocess
from collections.abc import Iterator
from pathlib import Path

#: Where per-run leases live (one JSON file per prefix: the owning process and its start time, the subnet).
LEASES = Path(os.environ.get("NGYM_TEST_NETNS_LEASES", "/run/ngym-test-netns"))
#: The subnets per-run hosts are given (10.230.0-255.0/24; the fixed ones tests name are 10.220-10.223).
RUN_SUBNETS = [f"10.230.{n}" for n in range(256)]


def sh(*command: str) -> None:
    """Run a command, ignoring its outcome (set-up and clean-up steps that may already be done)."""
    subprocess.run(command, check=False, capture_output=True)


def namespace_pids(namespace: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split() if pid.isdigit()]


def kill_namespace(namespace: str) -> int:
    """SIGKILL every process of the namespace, as a machine that dies; how many there were."""
    pids = namespace_pids(namespace)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


class Hosts:
    """Named hosts on one bridge: ``Hosts("i20e", "10.221.0", ["head", "node1"])``; a context manager."""

    def __init__(self, prefix: str, subnet: str, names: list[str]) -> None:
        if len(prefix) > 6:  # interface names: at most 15 characters ("PREFIX-br", "PREFIX-v12")
            raise ValueError(f"prefix {prefix!r}: at most 6 characters")
        self.prefix, self.subnet, self.names = prefix, subnet, list(names)
        self.bridge = f"{prefix}-br"
        self.gateway = f"{subnet}.1"
        #: this run's lease (:meth:`for_this_run`), removed with the hosts
        self.lease: Path | None = None

    @classmethod
    def for_this_run(cls, tag: str, names: list[str]) -> Hosts:
        """Hosts whose prefix (``tag`` and 4 random characters) and subnet belong to this run alone, leased in
        ``LEASES`` until :meth:`drop`; what runs killed outright left is removed here, nothing of a live run."""
        if len(tag) > 2:
            raise ValueError(f"tag {tag!r}: at most 2 characters (the prefix adds 4)")
        LEASES.mkdir(mode=0o700, parents=True, exist_ok=True)
        with (LEASES / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            leased = _sweep_dead_leases()
            used = leased | _subnets_in_use()
            subnet = next((net for net in RUN_SUBNETS if net not in used), None)
            if subnet is None:
                raise RuntimeError(f"no free subnet among {RUN_SUBNETS[0]}-{RUN_SUBNETS[-1]} for test hosts")
            namespaces = _namespaces()
            while True:
                prefix = tag + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(4))
                if not (LEASES / prefix).exists() and not any(n.startswith(f"{prefix}-") for n in namespaces):
                    break
            made = cls(prefix, subnet, names)
            made.lease = LEASES / prefix
            owner = {"pid": os.getpid(), "start": _start_time(os.getpid()), "subnet": subnet, "hosts": len(names)}
            made.lease.write_text(json.dumps(owner))
        return made

    def namespace(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def address(self, name: str) -> str:
        return f"{self.subnet}.{10 + self.names.index(name)}"

    def exec_argv(self, name: str) -> list[str]:
        """The argv prefix that runs a command on the host ``name``."""
        return ["ip", "netns", "exec", self.namespace(name)]

    def make(self) -> None:
        self._remove()  # what a killed earlier run left
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        # Docker's FORWARD policy would drop bridged traffic between the namespaces (br_netfilter): allow it
        sh("iptables", "-I", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")
        for i, name in enumerate(self.names):
            ns, outer, inner = self.namespace(name), f"{self.prefix}-v{i}", f"{self.prefix}-p{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "link", "set", outer, "master", self.bridge)
            sh("ip", "link", "set", outer, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.address(name)}/24", "dev", inner)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", self.gateway)

    def kill(self, name: str) -> int:
        """Every process of the host SIGKILLed; how many there were."""
        return kill_namespace(self.namespace(name))

    def drop(self) -> None:
        """Remove every namespace of the prefix (its processes killed first), the veths and the bridge; then the
        run's lease, if it has one."""
        self._remove()
        if self.lease is not None:
            self.lease.unlink(missing_ok=True)

    def _remove(self) -> None:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        for ns in [n for n in listed if n.startswith(f"{self.prefix}-")]:
            kill_namespace(ns)
            sh("ip", "netns", "del", ns)  # its end of each veth pair goes with it, and so the pair
        for i in range(len(self.names)):
            sh("ip", "link", "del", f"{self.prefix}-v{i}")
        while (
            subprocess.run(
                ["iptables", "-D", "FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"], capture_output=True
            ).returncode
            == 0
        ):
            pass  # every copy an earlier run inserted
        sh("ip", "link", "del", self.bridge)

    def __enter__(self) -> Hosts:
        self.make()
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()


def _start_time(pid: int) -> int | None:
    """The process's start time (``/proc/PID/stat`` field 22), which tells it from a later process given its pid."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _namespaces() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()


def _subnets_in_use() -> set[str]:
    """The /24s (``A.B.C``) of every IPv4 address on this namespace's interfaces."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout.split()
    return {word.split("/")[0].rsplit(".", 1)[0] for word in out if "/" in word and word.count(".") == 3}


def _sweep_dead_leases() -> set[str]:
    """Remove the hosts of every lease whose process is gone; the subnets of the live ones. Called under the lock."""
    live: set[str] = set()
    for lease in LEASES.iterdir():
        if lease.name.startswith("."):
            continue
        try:
            owner = json.loads(lease.read_text())
        except (OSError, ValueError):
            lease.unlink(missing_ok=True)
            continue
        if owner.get("start") is not None and _start_time(int(owner["pid"])) == owner["start"]:
            live.add(str(owner["subnet"]))
            continue
        stale = Hosts(lease.name, str(owner["subnet"]), [f"h{i}" for i in range(int(owner.get("hosts", 0)))])
        stale.lease = lease
        stale.drop()
    return live


@contextlib.contextmanager
def hosts(prefix: str, subnet: str, names: list[str]) -> Iterator[Hosts]:
    """:class:`Hosts` made on entry and dropped (with their processes) on exit."""
    with Hosts(prefix, subnet, names) as made:
        yield made


#: set in the environment of what a test starts outside its namespaces (``ngym up``'s ``servers:``), so that a
#: later run can find and kill what a run killed outright left
RUN_MARK = "NGYM_TEST_RUN"


def kill_marked(marker: str) -> int:
    """SIGKILL every process whose command line or environment holds ``marker`` (a temp folder a test gave it, or
    a variable a test set for what it starts, e.g. ``RUN_MARK + "=i20e"``): what a run killed outright left
    running outside its namespaces. Returns how many were found."""
    found, wanted = 0, marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted in (entry / "cmdline").read_bytes() or wanted + b"\0" in (entry / "environ").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
                found += 1
        except (OSError, ProcessLookupError):
            continue  # gone, or not ours to read
    return found
