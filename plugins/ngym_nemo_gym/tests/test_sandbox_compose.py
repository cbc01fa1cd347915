"""``AsyncSandboxCompose``: the rendered Compose file (pure), and a project on the real Docker engine.

The Docker test runs a terminal_bench_4-shaped collection from the local ``ngym-base:bookworm`` image: ``main``
(``sleep infinity``, exec'd into), ``web`` (an HTTP server with a healthcheck, reached by service name and by an
alias) and ``init`` (a one-shot service ``main`` waits to complete), through the docker compose CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from nemo_gym.sandbox import AsyncSandboxCompose, SandboxResources, SandboxSpec
from nemo_gym.sandbox.adapters.compose_file import render_compose_file

HEALTHCHECK = {
    "test": ["CMD", "python3", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8080')"],
    "interval": "1s",
    "timeout": "5s",
    "retries": 30,
    "start_interval": "1s",
}


def document(image: str) -> dict[str, Any]:
    """A resolved Compose document, as terminal_bench_4's ``resolve_compose`` writes one."""
    return {
        "services": {
            "main": {
                "image": image,
                "command": ["sh", "-c", "sleep infinity"],
                "environment": {"TASK": "compose", "PRICE": "$5"},
                "depends_on": {
                    "web": {"condition": "service_healthy"},
                    "init": {"condition": "service_completed_successfully"},
                },
                "x-sandbox": {"hosts": []},
            },
            "web": {
                "image": image,
                "command": ["python3", "-m", "http.server", "8080"],
                "working_dir": "/srv",
                "healthcheck": HEALTHCHECK,
                "ports": [{"target": 8080}],
                "networks": {"default": {"aliases": ["api"]}},
                "x-sandbox": {"resolve_environment": []},
            },
            "init": {"image": image, "command": ["sh", "-c", "exit 0"]},
        }
    }


def test_specs_merge_under_the_compose_fields_and_the_file_stays_literal() -> None:
    spec = SandboxSpec(
        env={"TASK": "spec", "ONLY_SPEC": "1"},
        workdir="/app",
        metadata={"tb4-session": "s1"},
        resources=SandboxResources(cpu=2, memory_mib=512),
    )
    out = render_compose_file(document("img"), {"main": spec})
    main, web = out["services"]["main"], out["services"]["web"]
    assert main["environment"] == {"TASK": "compose", "ONLY_SPEC": "1", "PRICE": "$$5"}  # Compose wins; $ literal
    assert (main["working_dir"], main["cpus"], main["mem_limit"]) == ("/app", 2.0, 512 * 1024 * 1024)
    assert main["labels"] == {"tb4-session": "s1"} and "x-sandbox" not in main
    assert web["ports"] == ["127.0.0.1::8080/tcp"] and web["working_dir"] == "/srv"
    assert web["healthcheck"]["start_interval"] == "1s" and main["depends_on"]["web"] == {
        "condition": "service_healthy"
    }
    legacy = render_compose_file(document("img"), legacy=True)["services"]["web"]  # docker-compose 1.x
    assert "start_interval" not in legacy["healthcheck"]


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"build": "."}, NotImplementedError, "unsupported Compose fields"),
        ({"image": None}, ValueError, "requires a prebuilt image"),
        ({"ports": [{"target": 80, "published": 8080}]}, NotImplementedError, "Fixed published ports"),
        ({"depends_on": {"nowhere": {}}}, ValueError, "unknown dependency"),
        ({"depends_on": {"init": {"condition": "service_healthy"}}}, ValueError, "has no healthcheck"),
        ({"x-sandbox": {"hosts": ["x"]}}, ValueError, "x-sandbox.hosts"),
        ({"environment": ["A=1"]}, ValueError, "resolve environment to a mapping"),
    ],
)
def test_what_neither_nemo_gym_nor_compose_can_honour_is_refused(
    change: dict[str, Any], error: type, match: str
) -> None:
    doc = document("img")
    doc["services"]["main"] = {**doc["services"]["main"], **change}
    with pytest.raises(error, match=match):
        render_compose_file(doc)


async def test_a_provider_without_networking_is_refused_before_anything_starts(tmp_path: Path) -> None:
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(document("img")))
    compose = AsyncSandboxCompose({"local": {}}, path)
    with pytest.raises(NotImplementedError, match="'local' does not support networking"):
        await compose.start()


async def test_a_compose_project_on_the_real_engine(tmp_path: Path, docker_base_image: str) -> None:
    import docker

    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(document(docker_base_image)))
    (tmp_path / "note.txt").write_text("uploaded")
    spec = SandboxSpec(env={"ONLY_SPEC": "yes"}, workdir="/work", metadata={"tb4-session": "s1"})
    compose = AsyncSandboxCompose({"docker": {}}, path, service_specs={"main": spec}, timeout_s=120)
    engine = docker.from_env()
    try:
        await compose.start()
        assert set(compose.services) == {"main", "web", "init"}
        main = compose.services["main"]
        result = await main.exec('pwd; echo "$TASK $ONLY_SPEC $PRICE"')
        assert (result.stdout, result.return_code) == ("/work\ncompose yes $5\n", 0)
        for host in ("web", "api"):  # by service name and by alias, on the project network
            fetch = f"python3 -c \"import urllib.request as u; print(u.urlopen('http://{host}:8080').status)\""
            assert (await main.exec(fetch)).stdout == "200\n"
        await main.upload(tmp_path / "note.txt", "/work/in/note.txt")
        await main.download("/work/in/note.txt", tmp_path / "back.txt")
        assert (tmp_path / "back.txt").read_text() == "uploaded"
        assert (await main.exec("id -un", user="nobody")).stdout == "nobody\n"
        endpoint = await compose.services["web"].endpoint(8080)
        assert endpoint.endpoint.startswith("http://127.0.0.1:")
        import httpx

        async with httpx.AsyncClient() as client:
            assert (await client.get(endpoint.endpoint)).status_code == 200
        container = engine.containers.get(main.handle.sandbox_id if main.handle else "")
        assert container.labels["tb4-session"] == "s1"
    finally:
        await compose.stop()
    project = {"label": f"com.docker.compose.project={compose.project}"}
    assert engine.containers.list(all=True, filters=project) == []
    assert engine.networks.list(filters=project) == []


async def test_a_failing_service_fails_start_with_its_log_and_leaves_nothing(
    tmp_path: Path, docker_base_image: str
) -> None:
    import docker

    doc = {
        "services": {"main": {"image": docker_base_image, "command": ["sh", "-c", "echo broken config >&2; exit 3"]}}
    }
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(doc))
    compose = AsyncSandboxCompose({"docker": {}}, path, timeout_s=60)
    with pytest.raises(RuntimeError, match=r"(?s)'main' exited \(3\).*broken config"):
        await compose.start()
    project = {"label": f"com.docker.compose.project={compose.project}"}
    assert docker.from_env().containers.list(all=True, filters=project) == []


async def test_a_service_never_healthy_times_out_naming_it(tmp_path: Path, docker_base_image: str) -> None:
    never = {"test": ["CMD", "false"], "interval": "1s", "retries": 1000}
    doc = {"services": {"main": {"image": docker_base_image, "command": ["sleep", "60"], "healthcheck": never}}}
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(doc))
    compose = AsyncSandboxCompose({"docker": {}}, path, timeout_s=8)
    with pytest.raises(TimeoutError, match="not ready within 8s \\(waiting for: service 'main'\\)"):
        await compose.start()
