"""HAProxy in front of ``ngym run --workers N`` runs ``NGYM_HAPROXY_NICE`` nice levels below the supervisor
(default 10): woken less often per request than at the workers' level. A bad value is one clear error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ngym.errors import ConfigError
from ngym.server.hosting.haproxy import DEFAULT_HAPROXY_NICE, HAPROXY_NICE_ENV, haproxy_nice, lower_priority


def nice_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])


@pytest.mark.parametrize(("value", "levels"), [("", DEFAULT_HAPROXY_NICE), ("0", 0), ("19", 19), (" 5 ", 5)])
def test_the_levels_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, value: str, levels: int) -> None:
    monkeypatch.setenv(HAPROXY_NICE_ENV, value)
    assert haproxy_nice() == levels


@pytest.mark.parametrize("value", ["-5", "20", "ten", "1.5"])
def test_a_value_that_is_not_0_to_19_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(HAPROXY_NICE_ENV, value)
    with pytest.raises(ConfigError, match=f"{HAPROXY_NICE_ENV}=.*0 to 19"):
        haproxy_nice()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads nice values from /proc")
@pytest.mark.parametrize("levels", [0, 7])
def test_the_child_runs_that_many_levels_below_its_parent(levels: int) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        preexec_fn=lambda: lower_priority(levels),
    )
    try:
        assert nice_of(child.pid) == min(19, nice_of(os.getpid()) + levels)
    finally:
        child.communicate(b"")
