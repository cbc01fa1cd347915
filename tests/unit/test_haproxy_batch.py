"""HAProxy in front of ``ngym run --workers N`` runs in Linux's batch scheduling class (``NGYM_HAPROXY_BATCH``, on
by default): woken, it does not preempt a worker. A bad value is one clear error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ngym.errors import ConfigError
from ngym.server.hosting.haproxy import HAPROXY_BATCH_ENV, batch_scheduling, haproxy_batch


@pytest.mark.parametrize(("value", "batch"), [("", True), ("1", True), (" 0 ", False), ("0", False)])
def test_the_class_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, batch: bool) -> None:
    monkeypatch.setenv(HAPROXY_BATCH_ENV, value)
    assert haproxy_batch() is batch


@pytest.mark.parametrize("value", ["yes", "2", "true"])
def test_another_value_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(HAPROXY_BATCH_ENV, value)
    with pytest.raises(ConfigError, match=f"{HAPROXY_BATCH_ENV}=.*1 .* or 0"):
        haproxy_batch()


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no batch scheduling class on this platform")
def test_the_child_runs_in_the_batch_class_at_its_parents_nice_level() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, preexec_fn=batch_scheduling
    )
    try:
        assert os.sched_getscheduler(child.pid) == os.SCHED_BATCH
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        child.communicate(b"")
