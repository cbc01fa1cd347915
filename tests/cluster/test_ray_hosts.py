"""The cluster tests' cleanup rule: a process a test started (or one started by it, in a session of its own, as
``ngym up`` starts the fleet's local servers) is found by its inherited mark and killed by ``Hosts.drop``, so a
test killed outright leaves nothing to the next run; unmarked processes are left alone."""

from __future__ import annotations

import subprocess
import sys
import time

from .ray_hosts import Hosts

CHILD = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); time.sleep(60)"  # noqa: E501


def test_drop_kills_what_a_test_started_even_in_a_new_session_and_nothing_else() -> None:
    hosts = Hosts("i20x", "10.229.0", ["head"])  # a prefix of its own: no running cluster test is touched
    marked = subprocess.Popen([sys.executable, "-c", CHILD], env=hosts.env, start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while len(hosts.marked()) < 2:  # the child and its own child (another session)
            assert time.monotonic() < deadline, "the marked processes did not start"
            time.sleep(0.1)
        grandchild = next(pid for pid in hosts.marked() if pid != marked.pid)
        hosts.drop()
        assert marked.wait(timeout=10) != 0
        deadline = time.monotonic() + 10
        while grandchild in hosts.marked():
            assert time.monotonic() < deadline, "the grandchild in its own session survived"
            time.sleep(0.1)
        assert other.poll() is None  # not the test's: left running
    finally:
        marked.kill()
        other.kill()
        marked.wait()
        other.wait()
