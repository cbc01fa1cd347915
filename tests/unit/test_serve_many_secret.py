"""`ngym run A B` starts one child per environment: the spec, which may hold session_secret, travels in the
child's environment, never on its command line (every process on the host can read every command line)."""

from __future__ import annotations

import signal
import sys

from ngym.server import host
from ngym.server.app import SPEC_ENV, ServeSpec
from ngym.server.host import serve_many


class _Exited:
    returncode = 0

    def poll(self) -> int:
        return 0


def test_the_spec_and_its_secret_are_not_on_the_childs_command_line(monkeypatch) -> None:
    started: list[tuple[list[str], dict[str, str]]] = []

    def popen(cmd: list[str], env: dict[str, str] | None = None) -> _Exited:
        started.append((cmd, env or {}))
        return _Exited()

    monkeypatch.setattr(host.subprocess, "Popen", popen)
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    spec = ServeSpec(target="x:Y", name="x", fields={"session_secret": "s3cret-on-no-command-line"})
    try:
        assert serve_many([spec], workers=1) == 0
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    ((cmd, env),) = started
    assert cmd == [sys.executable, "-m", "ngym.server.host", "1", "0"]
    assert not any("s3cret" in word for word in cmd)
    assert ServeSpec.from_json(env[SPEC_ENV]) == spec
