"""The math_with_code image with the real engine: the sandbox holds inside its own container.

Outside testing found the sandbox mostly off in the image (the server was not root there): code read the session
secret from /proc/1/environ, wrote to /home/ngym, signalled other sessions' workers and stopped the container with
`os.kill(1, SIGTERM)`. These tests build the image with `ngym containerize math_with_code --run` (which starts it
with the run options the environment declares), run the same probes through `execute_python` in the real
container, and check that a container started without those options refuses to serve, with a clear error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import secrets
import time
import uuid
from typing import Any

import httpx
import pytest

from ngym.containerize.smoke import published_url, remove_container, start_container, wait_healthy
from ngym.containerize.spec import RunOptions, resolve_plugin

from .conftest import REPO, ngym

_probes_path = REPO / "resources_servers" / "math_with_code" / "tests" / "isolation_probes.py"
_spec = importlib.util.spec_from_file_location("isolation_probes", _probes_path)
probes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probes)

ROW = {"responses_create_params": {"input": "x"}, "expected_result": "1"}
VENV_PYTHON = "/opt/ngym/venv/bin/python"
#: Run with `docker exec`: the container's view of the server (pid 1), the forkserver and the workers.
LIST_PROCESSES = r"""
import json, os
found = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            uid = int(next(l for l in open(f"/proc/{p}/status") if l.startswith("Uid:")).split()[1])
            found[int(p)] = [uid, open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:120]]
        except (OSError, StopIteration):
            pass
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def math_image(base_image: str, docker_client: Any) -> Any:
    """The image, built and rolled out once by `ngym containerize math_with_code --run` (unique tag)."""
    from docker.errors import ImageNotFound

    tag = f"ngym-pytest-math-{uuid.uuid4().hex[:8]}:test"
    proc = ngym("containerize", "math_with_code", "--base-image", base_image, "--tag", tag, "--run", "--json")
    try:
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield tag, json.loads(proc.stdout)
    finally:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(tag, noprune=True)


class Session:
    """One rollout's cookie, copied by hand."""

    def __init__(self, url: str) -> None:
        self.url, self.cookie = url, ""

    def post(self, route: str, body: dict) -> dict:
        reply = httpx.post(f"{self.url}/{route}", json=body, headers={"cookie": self.cookie}, timeout=60)
        if "set-cookie" in reply.headers:
            self.cookie = reply.headers["set-cookie"].split(";", 1)[0]
        assert reply.status_code == 200, (route, reply.status_code, reply.text)
        return reply.json()


def test_containerize_run_starts_it_hardened_and_rolls_out(math_image: Any, docker_client: Any) -> None:
    tag, result = math_image
    assert result["run"]["rollout"]["reward"] == 1.0
    flags = result["docker_run_args"]
    assert flags[:4] == ["--user", "root", "--cap-drop", "ALL"] and "SYS_ADMIN" in flags
    labels = docker_client.images.get(tag).labels
    assert labels["dev.ngym.run.options"] == " ".join(flags)


def test_hostile_code_in_the_container_reaches_nothing(math_image: Any, docker_client: Any) -> None:
    tag, _ = math_image
    secret = "probe-" + secrets.token_hex(16)
    options = resolve_plugin("math_with_code").run_options
    name = f"ngym-pytest-math-{uuid.uuid4().hex[:8]}"
    container = start_container(
        docker_client, tag, environment={"NGYM_SESSION_SECRET": secret}, name=name, run_options=options
    )
    try:
        url = published_url(container)
        wait_healthy(container, 120)
        enforcement = httpx.get(f"{url}/sandbox").json()["enforcement"]
        for layer in ("unprivileged_uid", "mount_namespace", "pid_namespace", "network_namespace"):
            assert enforcement[layer] is True, enforcement
        a, b = Session(url), Session(url)
        a.post("seed_session", ROW)
        b.post("seed_session", ROW)
        for session in (a, b):  # after a call, each session's user-code process is certainly there
            session.post("execute_python", {"code": "0"})
        code, out = container.exec_run([VENV_PYTHON, "-c", LIST_PROCESSES])
        assert code == 0, out
        seen = {int(pid): (uid, cmd) for pid, (uid, cmd) in json.loads(out).items()}
        workers = [pid for pid, (uid, _) in seen.items() if uid >= 1_000_000_000]
        forkserver = [pid for pid, (uid, cmd) in seen.items() if uid == 0 and "sandbox.zygote" in cmd]
        # each session: a supervisor and the user-code process it forked
        assert len(workers) == 4 and len(forkserver) == 1 and seen[1][0] == 0, seen
        writes = ["/home/ngym", "/tmp", "/opt/ngym", "/", "/var/tmp", "/dev/shm"]
        report = probes.parse(
            a.post("execute_python", {"code": probes.probe_code(secret, [*workers, *forkserver, 1], 8000, writes)})
        )
        assert report["environ_secret"] is False
        assert report["secret_in_proc"] == []
        assert report["visible_pids"] == [1, 2]
        # pid 1 is the session's supervisor in its own PID namespace; every other pid of the container is out of reach
        assert report["signalled"] == {str(pid): "ProcessLookupError" for pid in [*workers, *forkserver]} | {"1": "ok"}
        assert report["written"] == []
        assert report["connect"] == "Network is unreachable"
        assert report["sigterm_pid1"] == "sent"
        time.sleep(1)
        container.reload()
        assert container.attrs["State"]["Status"] == "running"
        assert httpx.get(f"{url}/health").status_code == 200
        assert a.post("execute_python", {"code": "6 * 7"})["result"] == "42"
        assert b.post("execute_python", {"code": "1 + 1"})["result"] == "2"
    finally:
        remove_container(container)


def test_forged_reply_frames_and_user_namespaces_in_the_container(math_image: Any, docker_client: Any) -> None:
    """The host probes of test_forged_frames.py through the real container: a forged frame past every cap, nested
    past the parser's limit, with NaN or wrong types ends its call with a clear error (never a 500, never a 60 MB
    answer) and moves no later answer; a well-formed forged frame answers no later call; no user namespace; code
    that exits its process is told it exited."""
    tag, _ = math_image
    options = resolve_plugin("math_with_code").run_options
    container = start_container(
        docker_client, tag, name=f"ngym-pytest-math-{uuid.uuid4().hex[:8]}", run_options=options
    )
    try:
        url = published_url(container)
        wait_healthy(container, 120)
        session = Session(url)
        session.post("seed_session", ROW)
        for kind in ("huge", "nested", "nan", "types"):
            reply = httpx.post(
                f"{url}/execute_python",
                json={"code": probes.forge_code(kind)},
                headers={"cookie": session.cookie},
                timeout=120,
            )
            assert reply.status_code == 200 and len(reply.content) < 8192, (kind, reply.status_code, reply.text[:300])
            assert "the sandbox refused this call's reply" in reply.json()["error_message"], kind
            after = session.post("execute_python", {"code": f"print({kind!r})\n'own'"})
            assert (after["stdout"], after["result"]) == (f"{kind}\n", "own"), kind
        session.post("execute_python", {"code": probes.forge_code("queued")})
        for n in range(3):
            reply = session.post("execute_python", {"code": f"{n} * 10"})
            assert reply["result"] == str(n * 10)
        report = json.loads(session.post("execute_python", {"code": probes.USERNS})["result"])
        assert set(report.values()) == {"Operation not permitted"}, report
        report = json.loads(session.post("execute_python", {"code": probes.SUPERVISOR})["result"])
        assert report == {"fd": "PermissionError", "mem": "PermissionError", "getfd": "refused", "ptrace": "refused"}
        # code that ends its own process is told so (in the image it was always answered as a forged frame)
        reply = session.post("execute_python", {"code": "import os\nos._exit(3)"})
        assert reply["error_message"].startswith("the Python process exited (exit code 3)"), reply
        assert session.post("execute_python", {"code": "'fresh'"})["result"] == "fresh"
    finally:
        remove_container(container)


def test_a_container_without_the_capabilities_refuses_with_a_clear_error(math_image: Any, docker_client: Any) -> None:
    tag, _ = math_image
    plain = start_container(
        docker_client, tag, name=f"ngym-pytest-math-{uuid.uuid4().hex[:8]}", run_options=RunOptions()
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            plain.reload()
            if plain.attrs["State"]["Status"] in ("exited", "dead"):
                break
            time.sleep(0.5)
        assert plain.attrs["State"]["Status"] == "exited", "started without SYS_ADMIN, the server must not serve"
        log = plain.logs().decode()
        assert "math_with_code refuses to run untrusted code" in log
        assert "PID namespace" in log and "allow_weak_sandbox: true" in log and "Traceback" not in log
    finally:
        remove_container(plain)
    weak = start_container(
        docker_client,
        tag,
        name=f"ngym-pytest-math-{uuid.uuid4().hex[:8]}",
        command=["allow_weak_sandbox=true"],
        run_options=RunOptions(),
    )
    try:
        wait_healthy(weak, 120)  # the explicit opt-out serves
    finally:
        remove_container(weak)
