"""`ngym run A B` starts one child per environment, and `run_webserver()` execs the host: the config, which may hold
session_secret, travels in the child's environment, never on its command line (every process on the host can read
every command line)."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest
from example_single_tool_call.app import WeatherResourcesServer

from ngym.server.hosting import host
from ngym.server.hosting.host import serve_many
from ngym.server.pipeline import base
from ngym.server.pipeline.app import SPEC_ENV, ServeSpec
from ngym.server.pipeline.base import CLASS_OVERRIDES_ENV


class _Exited:
    returncode = 0

    def poll(self) -> int:
        return 0


def test_the_spec_and_its_secret_are_not_on_the_childs_command_line(monkeypatch) -> None:
    started: list[tuple[list[str], dict[str, str]]] = []

    def popen(cmd: list[str], env: dict[str, str] | None = None, **_options: object) -> _Exited:
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
    assert cmd == [sys.executable, "-P", "-m", "ngym.server.hosting.host", "1", "0"]  # -P: no cwd on sys.path
    assert not any("s3cret" in word for word in cmd)
    assert ServeSpec.from_json(env[SPEC_ENV]) == spec


def test_the_childs_argv_and_environment_reach_serve_one(monkeypatch) -> None:
    served: list[tuple[ServeSpec, int, bool]] = []
    monkeypatch.setattr(host, "serve_one", lambda spec, workers, log: served.append((spec, workers, log)))
    spec = ServeSpec(target="x:Y", name="x", fields={"session_secret": "s3cret"})
    monkeypatch.setenv(SPEC_ENV, spec.to_json())
    host.main(["2", "1"])
    assert served == [(spec, 2, True)]
    assert SPEC_ENV not in os.environ  # popped: not handed on to anything this process starts


class _Execed(Exception):
    pass


def test_run_webserver_keeps_its_keyword_overrides_off_the_command_line(monkeypatch) -> None:
    execed: list[list[str]] = []

    def execv(_path: str, argv: list[str]) -> None:
        execed.append(argv)
        raise _Execed

    monkeypatch.setattr(base.os, "execv", execv)
    monkeypatch.setattr(sys, "argv", ["app.py", "port=0"])
    monkeypatch.delenv(CLASS_OVERRIDES_ENV, raising=False)  # restored after the test
    with pytest.raises(_Execed):
        WeatherResourcesServer.run_webserver(session_secret="s3cret-on-no-command-line")
    (argv,) = execed
    target = "example_single_tool_call.app:WeatherResourcesServer"
    assert argv[1:] == ["-m", "ngym.server.hosting.host", "--class", target, "port=0"]
    assert json.loads(os.environ[CLASS_OVERRIDES_ENV]) == {"session_secret": "s3cret-on-no-command-line"}

    started: list[tuple[str, dict[str, str], list[str]]] = []
    monkeypatch.setattr(host, "run_server_class", lambda *args: started.append(args))
    host.main(argv[3:])
    assert started == [(target, {"session_secret": "s3cret-on-no-command-line"}, ["port=0"])]
    assert CLASS_OVERRIDES_ENV not in os.environ
