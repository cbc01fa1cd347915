"""Real builds of the built-in environments on the local base image, run as real containers.

Checks what the issue asks of the image: a rollout through the published port gets reward 1.0, Docker's
healthcheck says healthy, the server runs as a non-root user, and neither the wheelhouse nor pip is in the image.
"""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from ngym.containerize.smoke import drive_rollout, load_example_rollout
from ngym.containerize.spec import resolve_plugin

from .conftest import ngym

#: Run inside the container: what must not be in a production image.
INSPECT_IMAGE = r"""
import json, os, shutil, importlib.util
whls = []
for root, dirs, files in os.walk("/"):
    if root.startswith(("/proc", "/sys", "/dev", "/usr/share/python-wheels")):
        dirs[:] = []
        continue
    whls += [os.path.join(root, f) for f in files if f.endswith(".whl")]
print(json.dumps({
    "uid": os.getuid(),
    "wheelhouse": os.path.exists("/wheelhouse"),
    "wheels": whls,
    "pip": importlib.util.find_spec("pip") is not None,
    "compilers": [c for c in ("gcc", "cc", "g++", "make") if shutil.which(c)],
    "ngym": importlib.util.find_spec("ngym").origin,
}))
"""


def _declare_oversize_body(url: str) -> bytes:
    """Send only the head of a POST declaring a 64 MiB body; return what the server answers before closing."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(b"POST /verify HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n" % (64 << 20))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize("name", ["example_single_tool_call", "example_session_state_mgmt"])
def test_environment_image_builds_runs_and_rolls_out(
    name: str, base_image: str, image_tag: str, docker_client: Any
) -> None:
    proc = ngym("containerize", name, "--base-image", base_image, "--tag", image_tag, "--run", "--keep", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    run = result["run"]
    container = docker_client.containers.get(run["container_id"])  # kept (--keep): removed whatever fails below
    try:
        assert "step 3/" in proc.stderr, "build progress (RUN steps) is streamed to the terminal"
        # quiet without -v: pip's own lines are not printed (a progress line may quote pip's latest, mid-line)
        pips = [line for line in proc.stderr.splitlines() if line.lstrip().startswith("Successfully installed")]
        assert not pips and len(proc.stderr.splitlines()) < 40, proc.stderr[-3000:]
        assert result["tag"] == image_tag and result["domain"] == "agent"
        assert run["health"] == "healthy" and run["kept"] is True
        assert run["rollout"]["reward"] == 1.0 == run["rollout"]["expected_reward"]
        # Docker's own view: healthy, non-root, port published
        container.reload()
        assert container.attrs["State"]["Health"]["Status"] == "healthy"
        assert container.attrs["Config"]["User"] == "10001:10001"
        assert run["url"].startswith("http://127.0.0.1:")

        # a second rollout, driven by the test itself through the published port
        plugin = resolve_plugin(name)
        rollout = drive_rollout(run["url"], load_example_rollout(plugin))
        assert rollout.reward == 1.0

        # the image runs the same server, with the same limits: an oversize body is refused before it is read,
        # a connection that never sends its headers is closed, a hostile session id is a 422
        assert _declare_oversize_body(run["url"]).startswith(b"HTTP/1.1 413 ")
        hostile = {"resources_session_id": "a;b", "episode_id": {"rollout_id": "r"}}
        assert httpx.post(f"{run['url']}/close_session", json=hostile).status_code == 422

        # every process in the container runs as the non-root user
        top = container.top(ps_args="-o pid,uid,args")
        uid_column = top["Titles"].index("UID")
        uids = {row[uid_column] for row in top["Processes"]}
        assert uids == {"10001"}, top

        # nothing of the build reaches the image
        code, out = container.exec_run(["/opt/ngym/venv/bin/python", "-c", INSPECT_IMAGE])
        assert code == 0, out
        facts = json.loads(out)
        assert facts["uid"] == 10001
        assert facts["wheelhouse"] is False and facts["wheels"] == []
        assert facts["pip"] is False and facts["compilers"] == []
        assert facts["ngym"].startswith("/opt/ngym/app/")
    finally:
        container.remove(force=True)

    image = docker_client.images.get(image_tag)
    labels = image.labels
    assert labels["dev.ngym.plugin.name"] == name
    assert labels["dev.ngym.plugin.domain"] == "agent"
    assert labels["org.opencontainers.image.title"] == plugin.distribution
    assert labels["org.opencontainers.image.version"] == plugin.version
    assert labels["org.opencontainers.image.source"]
    config = image.attrs["Config"]
    assert "8000/tcp" in config["ExposedPorts"]
    assert config["Entrypoint"][-6:] == ["run", name, "--host", "0.0.0.0", "--port", "8000"]
    assert not any("SECRET" in env for env in config["Env"])
    history = " ".join(layer.get("CreatedBy", "") for layer in image.history())
    assert "/wheelhouse" not in history, "no layer of the final image touches the wheelhouse"


def test_config_overrides_come_from_docker_run(base_image: str, image_tag: str, docker_client: Any) -> None:
    """``-e NGYM_OVERRIDES=...`` and ``docker run IMAGE key=value`` both reach ``ngym run``; arguments win."""
    from ngym.containerize.pipeline import ContainerizeOptions, containerize
    from ngym.containerize.smoke import published_url, remove_container, start_container, wait_healthy

    containerize(ContainerizeOptions("example_single_tool_call", tag=image_tag, base_image=base_image))
    cases = [
        ({"NGYM_OVERRIDES": "session_cookie_name=from_env"}, [], "from_env"),
        ({"NGYM_OVERRIDES": "session_cookie_name=from_env"}, ["session_cookie_name=from_args"], "from_args"),
        ({}, [], "ngym_session"),
    ]
    containers = []
    try:
        for environment, command, _ in cases:
            container = start_container(docker_client, image_tag, environment=environment, command=command)
            containers.append(container)
        for container, (_, _, cookie_name) in zip(containers, cases, strict=True):
            wait_healthy(container, timeout=60)
            seeded = httpx.post(
                f"{published_url(container)}/seed_session", json={"responses_create_params": {"input": "hi"}}
            )
            assert seeded.status_code == 200, seeded.text
            assert seeded.headers["set-cookie"].startswith(f"{cookie_name}="), seeded.headers["set-cookie"]
    finally:
        for container in containers:
            remove_container(container)
