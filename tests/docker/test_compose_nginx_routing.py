"""The Compose project's load balancer, for real: nginx from the project's own ``lb`` image (built from the
local base image) with the configuration ``ngym containerize --compose`` writes, in front of two real ``ngym run``
replicas reached under one name (``env``, as Compose's DNS gives every replica's address under the service's
name; here two ``--add-host`` entries and two loopback addresses).

* affinity (sessions in each replica's memory): every call of a NeMo Gym rollout reaches the replica that seeded
  it (nginx's ``consistent`` hash, which places its points by server name, went round robin over the addresses
  of the one name: 20 of 40 calls were 410);
* a shared store (Redis): NeMo Gym's wire goes to both replicas, and every request of an ORS session or of an
  OpenEnv episode held over HTTP reaches the replica that holds it (round robin: 404 and 409).

Each request on a connection of its own. About half a minute with the base image's layers cached.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ngym import processes
from ngym.child_python import python_module
from ngym.child_server import free_port, stop_process, wait_healthy
from ngym.containerize.deploy import LB_PORT, DeploySpec
from ngym.containerize.manifests import render_compose

from .conftest import in_ci

ENV = "example_session_state_mgmt"
SECRET = "compose-nginx-routing-test"
ADDRESSES = ("127.0.0.1", "127.0.0.2")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("redis-server") is None:
        if in_ci():
            pytest.fail("CI=true and redis-server is not installed")
        pytest.skip("redis-server is not installed")
    port = free_port()
    folder = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.contextmanager
def served_lb(base_image: str, tmp: Path, affinity: bool, port: int) -> Iterator[str]:
    """The ``lb`` image built from the rendered project, run on the host's network; its URL."""
    spec = DeploySpec(env_name=ENV, image="unused", replicas=2, affinity=affinity, base_image=base_image, port=port)
    lb = tmp / "lb"
    lb.mkdir()
    files = render_compose(spec)
    listen = free_port()
    (lb / "Dockerfile").write_text(files["lb/Dockerfile"])
    (lb / "nginx.conf").write_text(files["lb/nginx.conf"].replace(f"listen {LB_PORT};", f"listen {listen};"))
    tag = f"ngym-pytest-lb-{uuid.uuid4().hex[:8]}:test"
    name = f"ngym-pytest-lb-{uuid.uuid4().hex[:8]}"
    built = subprocess.run(
        ["docker", "build", "-q", "--build-arg", f"BASE_IMAGE={base_image}", "-t", tag, str(lb)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    hosts = [arg for address in ADDRESSES for arg in ("--add-host", f"env:{address}")]
    run = ["docker", "run", "-d", "--rm", "--name", name, "--network", "host", *hosts, tag]
    try:
        assert subprocess.run(run, capture_output=True, timeout=120, check=False).returncode == 0
        url = f"http://127.0.0.1:{listen}"
        wait_healthy(url, None, 60, path="/health")
        yield url
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=120, check=False)
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120, check=False)


@contextlib.contextmanager
def two_replicas(store: str, tmp: Path) -> Iterator[int]:
    """Two ``ngym run`` replicas on one port of two loopback addresses, sessions in ``store``; the port."""
    port = free_port()
    env = {**os.environ, "NGYM_SESSION_SECRET": SECRET, "NGYM_SESSION_STORE": store}
    procs = []
    try:
        for address in ADDRESSES:
            command = python_module("ngym.cli", "run", ENV, "--host", address, "--port", str(port))
            procs.append(processes.spawn(command, tmp / f"replica-{address}.log", env=env))
        for address, proc in zip(ADDRESSES, procs, strict=True):
            wait_healthy(f"http://{address}:{port}", proc, 60, tmp / f"replica-{address}.log", path="/livez")
        yield port
    finally:
        for proc in procs:
            stop_process(proc)


def nemo_rollouts(url: str, count: int) -> dict[int, int]:
    statuses: dict[int, int] = {}
    for _ in range(count):
        cookie = httpx.post(f"{url}/seed_session", json={"initial_count": 0}, timeout=30).headers["set-cookie"]
        for _ in range(2):
            called = httpx.post(
                f"{url}/increment_counter", json={"count": 1}, headers={"cookie": cookie.split(";")[0]}, timeout=30
            )
            statuses[called.status_code] = statuses.get(called.status_code, 0) + 1
    return statuses


def held_episodes(url: str, count: int) -> dict[int, int]:
    statuses: dict[int, int] = {}

    def post(path: str, **options: object) -> httpx.Response:
        answer = httpx.post(f"{url}{path}", timeout=30, **options)  # type: ignore[arg-type]
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        return answer

    for _ in range(count):
        opened = httpx.post(f"{url}/ors/create_session", timeout=30)
        sid = next(line[6:].strip() for line in opened.text.splitlines() if line.startswith("data: "))
        post("/ors/create", headers={"x-session-id": sid}, json={"split": "example", "index": 0})
        for _ in range(2):
            post("/ors/call", headers={"x-session-id": sid}, json={"name": "get_counter_value", "input": {}})
        cookies = dict(post("/openenv/reset", json={}).cookies)
        for _ in range(2):
            post("/openenv/step", json={"action": {"tool_name": "get_counter_value", "arguments": {}}}, cookies=cookies)
    return statuses


def test_affinity_keeps_every_call_of_a_rollout_on_its_replica(base_image: str, tmp_path: Path) -> None:
    with two_replicas("memory", tmp_path) as port, served_lb(base_image, tmp_path, True, port) as url:
        assert nemo_rollouts(url, 12) == {200: 24}


def test_a_shared_store_keeps_ors_sessions_and_openenv_episodes_on_their_replica(
    redis_url: str, base_image: str, tmp_path: Path
) -> None:
    with two_replicas(redis_url, tmp_path) as port, served_lb(base_image, tmp_path, False, port) as url:
        assert held_episodes(url, 6) == {200: 36}
        assert nemo_rollouts(url, 6) == {200: 12}
        served = [httpx.get(f"http://{a}:{port}/health", timeout=10).json()["traffic"]["requests"] for a in ADDRESSES]
        assert all(n > 5 for n in served), served  # NeMo Gym's wire went to both replicas
