"""terminal_bench_4's own ``Environment`` (from NeMo Gym's wheel, unchanged) runs a Compose task on the real
Docker engine through ``AsyncSandboxCompose`` with the ``docker`` provider.

The task is Harbor-shaped: ``environment/docker-compose.yaml`` with a ``main`` service and a ``db`` sidecar,
recorded OCI startup metadata for their images (``compose_image_configs``), a working directory and task
environment. Its own code resolves the Compose file (``resolve_compose``), starts the collection, makes its log
folders, runs commands in ``main`` and in the sidecar, and stops it; nothing of the project is left behind.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

SIDECAR = "import http.server as h; h.HTTPServer(('', 5432), h.SimpleHTTPRequestHandler).serve_forever()"


def image_record(image: str, cmd: list[str], workdir: str = "") -> dict[str, Any]:
    """What Harbor records for a published image (the fields ``resolve_compose`` reads)."""
    return {"image": image, "os": "linux", "architecture": "amd64", "config": {"Cmd": cmd, "WorkingDir": workdir}}


async def test_terminal_bench_4_compose_task_on_the_real_engine(
    tmp_path: Path, import_nemo_app: Callable[..., Any], docker_base_image: str
) -> None:
    import docker

    module = import_nemo_app("terminal_bench_4", "environment")
    task_module = importlib.import_module("resources_servers.terminal_bench_4.task")  # imported with it
    package = tmp_path / "package"
    (package / "environment").mkdir(parents=True)
    (package / "tests").mkdir()
    (package / "environment" / "docker-compose.yaml").write_text(
        "services:\n  main:\n    environment:\n      ROLE: agent\n    depends_on: [db]\n  db:\n    image: task/db\n"
    )
    images = {
        "task/agent": image_record(docker_base_image, ["sh"], "/app"),
        "task/db": image_record(docker_base_image, ["python3", "-c", SIDECAR]),
    }
    (tmp_path / "images.json").write_text(json.dumps(images))
    settings = {
        "environment": {"docker_image": "task/agent", "cpus": 1, "memory_mb": 512, "env": {"TASK": "compose"}},
        "verifier": {"environment": {"docker_image": "task/agent"}},
    }
    task = SimpleNamespace(
        config=task_module.TaskSettings.model_validate(settings), name="terminal-bench/compose", path=package
    )
    config = module.EnvironmentConfig.model_validate(
        {
            "cpu_enforcement_policy": "limit",
            "memory_enforcement_policy": "limit",
            "sandbox_provider": {"docker": {}},
            "sandbox_metadata": {"team": "rl"},
            "sandbox_provider_options": {},
            "sandbox_env": {},
            "sandbox_env_by_task": {},
            "sandbox_request_gpu_type": False,
            "sandbox_split_endpoints": False,
            "compose_image_configs": str(tmp_path / "images.json"),
            "sandbox_ttl_s": 3600,
            "sandbox_ready_timeout_s": 120,
            "default_exec_timeout_s": 60,
            "exec_shell": "bash -c",
            "image_rewrites": [],
            "workdir": None,
            "efs_logs_host_path": None,
            "efs_logs_init_image": "unused",
        }
    )
    environment = module.Environment(task, config, "session-1", tmp_path / "result")
    try:
        await environment.start()
        result = await environment.exec('echo "$ROLE $TASK $(pwd)"; ls -d /logs/agent')
        assert (result.stdout, result.return_code) == ("agent compose /app\n/logs/agent\n", 0)
        fetch = "python3 -c \"import urllib.request as u; print(u.urlopen('http://db:5432').status)\""
        assert (await environment.exec(fetch)).stdout == "200\n"  # the sidecar, by service name
        assert (await environment.exec("hostname -I", service="db")).return_code == 0
        assert (await environment.agent_workdir()) == "/app"
        container = docker.from_env().containers.get(environment.main._handle.sandbox_id)
        assert container.labels["tb4-session"] == "session-1" and container.labels["team"] == "rl"
    finally:
        await environment.stop()
    assert environment.closed and environment.resources[-1]["compose_project"] == environment.compose.project
    project = {"label": f"com.docker.compose.project={environment.compose.project}"}
    assert docker.from_env().containers.list(all=True, filters=project) == []


@pytest.fixture(autouse=True)
def _no_leftover_compose_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compose reads COMPOSE_* from the environment; a caller's must not change the project."""
    for name in ("COMPOSE_FILE", "COMPOSE_PROJECT_NAME", "COMPOSE_PROFILES"):
        monkeypatch.delenv(name, raising=False)
