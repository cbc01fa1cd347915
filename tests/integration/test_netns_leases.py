"""Per-run test hosts (``tests.netns.Hosts.for_this_run``): two runs at once get their own namespaces and subnets and
never remove each other's; what a run killed outright left is removed by the next run, a live run's never."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.netns import Hosts, _namespaces

pytestmark = pytest.mark.skipif(
    shutil.which("ip") is None or os.geteuid() != 0, reason="needs root and iproute2 (ip netns)"
)

ROOT = Path(__file__).resolve().parents[2]

#: Another run, in a process of its own: makes its hosts, says their prefix, then waits to be killed.
OTHER_RUN = textwrap.dedent(
    """
    import sys, time
    from tests.netns import Hosts
    made = Hosts.for_this_run("tl", ["a", "b"])
    made.make()
    print(made.prefix, made.subnet, flush=True)
    time.sleep(120)
    """
)


def _other_run() -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen([sys.executable, "-c", OTHER_RUN], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    prefix, subnet = proc.stdout.readline().split()
    return proc, prefix, subnet


def test_two_runs_at_once_keep_their_own_hosts() -> None:
    with Hosts.for_this_run("tl", ["a", "b"]) as first, Hosts.for_this_run("tl", ["a", "b"]) as second:
        assert first.prefix != second.prefix and first.subnet != second.subnet
        assert {first.namespace("a"), first.namespace("b"), second.namespace("a")} <= set(_namespaces())
        second.drop()
        assert first.namespace("a") in _namespaces() and second.namespace("a") not in _namespaces()
        ping = subprocess.run([*first.exec_argv("a"), "ping", "-c1", "-W2", first.address("b")], capture_output=True)
        assert ping.returncode == 0 or shutil.which("ping") is None, ping.stderr
    assert first.namespace("a") not in _namespaces() and first.lease is not None and not first.lease.exists()


def test_a_live_runs_hosts_are_kept_a_killed_runs_are_removed() -> None:
    other, prefix, subnet = _other_run()
    try:
        with Hosts.for_this_run("tl", ["a"]) as mine:  # the other run is alive: its hosts stay
            assert mine.subnet != subnet
            assert f"{prefix}-a" in _namespaces() and f"{prefix}-b" in _namespaces()
    finally:
        other.kill()
        other.wait()
    assert f"{prefix}-a" in _namespaces()  # killed outright: its hosts are left ...
    with Hosts.for_this_run("tl", ["a"]):  # ... until the next run sweeps them
        assert not any(n.startswith(f"{prefix}-") for n in _namespaces())
