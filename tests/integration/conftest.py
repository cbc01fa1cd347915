"""Real processes on real sockets: start ``ngym run`` (or a script) and wait until it answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from ngym.child_server import EnvironmentStartError, wait_healthy

VENV_BIN = Path(sys.executable).parent
FIXTURES = Path(__file__).parents[1] / "fixtures"


def child_venv(work: Path, *, system_site_packages: bool = True) -> tuple[Path, dict[str, str]]:
    """A throwaway virtualenv in ``work/venv`` that sees .venv's packages (ngym, pytest, ...) through a ``.pth``
    file, so what a test installs lands there, never in the shared .venv; (its python, the environment to run
    it with). ``system_site_packages=False`` hides the base interpreter's own packages, as .venv does (a
    ``trio`` there makes httpcore import it, which breaks under Locust's gevent patching).

    Made ``--without-pip``: ``python -m pip`` there is .venv's pip (seen through the ``.pth``), which installs into
    the interpreter running it, this venv. Installing a pip of its own (ensurepip) cost ~3 s of CPU per venv, ~30 s
    of wall time on a loaded machine."""
    venv = work / "venv"
    system = ["--system-site-packages"] if system_site_packages else []
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *system, str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    parent_site = sysconfig.get_paths()["purelib"]  # .venv's: ngym (editable), pytest, fastapi, ...
    Path(purelib, "ngym_parent_venv.pth").write_text(f"import site; site.addsitedir({parent_site!r})\n")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {"NGYM_CACHE_DIR": str(work / "cache"), "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}"}
    env.pop("NGYM_STRICT_PLUGINS", None)
    return python, env


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[str]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> tuple[int, str]:
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out


def start(cmd: list[str], port: int, env: dict[str, str] | None = None, timeout: float = 30) -> Served:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})}
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout, path="/")
    except EnvironmentStartError as exc:
        proc.kill()
        raise AssertionError(f"{cmd}: {exc}: {proc.communicate()[0]}") from None
    return Served(url, proc)


@pytest.fixture
def serve() -> Iterator:
    started: list[Served] = []

    def _serve(cmd: list[str], port: int, env: dict[str, str] | None = None) -> Served:
        served = start(cmd, port, env)
        started.append(served)
        return served

    yield _serve
    for served in started:
        if served.proc.poll() is None:
            # SIGTERM first: a supervisor of --workers N stops its workers and HAProxy and removes its folder
            # (a SIGKILL leaves the folder behind); SIGKILL only for one that does not stop
            served.proc.terminate()
            try:
                served.proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                served.proc.kill()
                served.proc.communicate()


class HandCookieClient:
    """A blocking client that copies Set-Cookie onto the next request by hand (NeMo Gym agents do this)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookie: str | None = None

    def post(self, path: str, body: object = None) -> httpx.Response:
        headers = {"cookie": self.cookie} if self.cookie else {}
        response = httpx.post(f"{self.url}{path}", json=body if body is not None else {}, headers=headers, timeout=30)
        if "set-cookie" in response.headers:
            self.cookie = response.headers["set-cookie"].split(";", 1)[0]
        return response
