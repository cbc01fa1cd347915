"""A NeMo Gym server declaring ``ray_enabled = True`` gets Ray started before ngym serves it, as NeMo Gym's
``run_webserver`` does: not by the environment's first ``.remote()``, from inside a request on the event loop.

Served for real (``ngym run`` in a subprocess); ``ray`` is a stand-in package on the path that records
``ray.init`` calls in a file (the real Ray takes tens of seconds to start and is not what is under test).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

FAKE_RAY = """
import json, os
_initialized = False
def is_initialized():
    return _initialized
def init(**kwargs):
    global _initialized
    _initialized = True
    with open(os.environ["FAKE_RAY_LOG"], "a") as log:
        log.write(json.dumps(kwargs) + "\\n")
"""

SERVER = """
from nemo_gym.base_resources_server import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer
from ngym import Domain

class UsesRay(SimpleResourcesServer):
    ray_enabled = {ray_enabled}
    domain = Domain.OTHER

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ray_inits_when_first_answering(tmp_path: Path, ray_enabled: str, **environ: str) -> list[dict]:
    """Serve a server class with ``ray_enabled``; the ``ray.init`` calls made by the time it first answers."""
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text(FAKE_RAY)
    (tmp_path / "app.py").write_text(SERVER.format(ray_enabled=ray_enabled))
    log = tmp_path / "ray.log"
    log.write_text("")
    port = free_port()
    outer = {key: value for key, value in os.environ.items() if key not in {"RAY_ADDRESS", "NGYM_RAY_NUM_CPUS"}}
    env = {**outer, "PYTHONPATH": str(tmp_path), "FAKE_RAY_LOG": str(log), **environ}
    process = subprocess.Popen(
        [sys.executable, "-m", "ngym.cli", "run", "app.py:UsesRay", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the server did not answer /health in 60 s"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        return [json.loads(line) for line in log.read_text().splitlines()]
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_server_declaring_ray_has_ray_started_before_it_answers(tmp_path: Path) -> None:
    # Before any request: the same ray.init() the environment's first .remote() would have made.
    assert ray_inits_when_first_answering(tmp_path, "True") == [{"ignore_reinit_error": True}]


@pytest.mark.parametrize("ray_enabled", ["None"])
def test_a_server_not_declaring_ray_does_not_start_it(tmp_path: Path, ray_enabled: str) -> None:
    assert ray_inits_when_first_answering(tmp_path, ray_enabled) == []


def test_the_local_ray_announces_the_cpus_asked_for(tmp_path: Path) -> None:
    # code_gen: each Ray task mostly waits on the processes it forks; Ray runs as many at once as it has CPUs.
    inits = ray_inits_when_first_answering(tmp_path, "True", NGYM_RAY_NUM_CPUS="8")
    assert inits == [{"num_cpus": 8, "ignore_reinit_error": True}]


def test_a_cluster_address_keeps_its_own_cpus(tmp_path: Path) -> None:
    inits = ray_inits_when_first_answering(tmp_path, "True", NGYM_RAY_NUM_CPUS="8", RAY_ADDRESS="10.0.0.1:6379")
    assert inits == [{"address": "10.0.0.1:6379", "ignore_reinit_error": True}]
