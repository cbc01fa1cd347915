"""A child an environment starts with asyncio (an inner server, a worker, a sandbox command) must not hold the
server's listening socket.

``ngym run`` serves on uvloop, whose ``create_subprocess_exec`` ignores ``close_fds``: every inheritable descriptor
reached the child, the listening socket among them (it was left inheritable). ngym-ors' inner ORS server, the
verifiers worker and NeMo Gym's local sandbox commands all held it: any of them could ``accept()`` the server's
connections (other rollouts' requests, their cookies) and answer them, and kept the port bound after the server
died. Served here by ``ngym run`` (one process, and ``--workers 2`` behind HAProxy), as a user runs it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import httpx
import pytest

from ngym.child_server import free_port

from .conftest import start

VENV_BIN = Path(sys.executable).parent
HAPROXY = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")

APP = '''
import asyncio, sys
from fastapi import FastAPI
from ngym import BaseResourcesServerConfig, BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer

#: run in the child: the listening sockets among its descriptors (a TCP port, or a unix socket's path: a worker
#: of ``--workers N`` listens on one)
PROBE = """
import json, os, socket
ports = []
for fd in os.listdir("/proc/self/fd"):
    try:
        s = socket.socket(fileno=os.dup(int(fd)))
    except OSError:
        continue
    try:
        if s.family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX) and s.type == socket.SOCK_STREAM:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                name = s.getsockname()
                ports.append(name[1] if isinstance(name, tuple) else str(name))
    finally:
        s.close()
print(json.dumps(ports))
"""


class ChildServer(SimpleResourcesServer):
    config: BaseResourcesServerConfig

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/child_listeners")(self.child_listeners)
        return app

    async def child_listeners(self) -> dict:
        child = await asyncio.create_subprocess_exec(sys.executable, "-c", PROBE, stdout=asyncio.subprocess.PIPE)
        out, _ = await child.communicate()
        return {"ports": out.decode().strip(), "loop": type(asyncio.get_running_loop()).__module__}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)
'''


@pytest.mark.parametrize(
    "workers",
    [1, pytest.param(2, marks=pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed"))],
)
def test_a_child_started_with_asyncio_holds_no_listening_socket(tmp_path: Path, workers: int) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    port = free_port()
    cmd = [str(VENV_BIN / "ngym"), "run", str(app), "--port", str(port), "domain=agent"]
    served = start([*cmd, "--workers", str(workers)] if workers > 1 else cmd, port, timeout=60)
    try:
        for _ in range(workers * 2):  # with two workers, both answer one of them
            answer = httpx.post(f"{served.url}/child_listeners", json={}, timeout=60).json()
            assert answer["ports"] == "[]", answer
    finally:
        served.stop()
