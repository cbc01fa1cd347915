"""Deploy manifests: Kubernetes objects validated against the official JSON schemas (kubernetes-validate,
offline), the Compose project checked structurally (and by docker-compose/docker compose when installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ngym.containerize.manifests import (
    ENV_FILE,
    REPLAYABLE_CALLS,
    DeploySpec,
    deploy_spec,
    env_needs_affinity,
    needs_affinity,
    render_compose,
    render_k8s,
    render_nginx_conf,
    write_manifests,
)
from ngym.errors import ConfigError

K8S_VERSION = "1.30.0"
SHARED = DeploySpec(env_name="example_session_state_mgmt", image="ngym-example_session_state_mgmt:0.1.0", replicas=3)
PINNED = DeploySpec(env_name="math_with_code", image="ngym-math_with_code:0.1.0", replicas=2, affinity=True)


def k8s_objects(spec: DeploySpec) -> dict[str, dict]:
    objects = {}
    for text in render_k8s(spec).values():
        for doc in yaml.safe_load_all(text):
            objects[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return objects


@pytest.mark.parametrize("spec", [SHARED, PINNED], ids=["shared", "affinity"])
def test_every_k8s_object_is_valid_against_the_official_schema(spec: DeploySpec) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    objects = k8s_objects(spec)
    assert objects
    for name, doc in objects.items():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises with the offending field
        assert "&id" not in yaml.safe_dump(doc), name


def test_k8s_shared_deployment_uses_redis_the_secret_and_health_probes() -> None:
    objects = k8s_objects(SHARED)
    app = SHARED.app
    assert set(objects) == {
        f"Deployment/{app}",
        f"Service/{app}",
        f"HorizontalPodAutoscaler/{app}",
        f"Deployment/{app}-redis",
        f"Service/{app}-redis",
    }
    deployment = objects[f"Deployment/{app}"]
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["selector"]["matchLabels"] == deployment["spec"]["template"]["metadata"]["labels"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NGYM_SESSION_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{app}-session",
        "key": "NGYM_SESSION_SECRET",
    }
    assert env["NGYM_SESSION_STORE"]["value"] == f"redis://{app}-redis:6379/0"
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert container["resources"]["requests"]["cpu"]  # the HPA's utilisation needs a request
    hpa = objects[f"HorizontalPodAutoscaler/{app}"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == app and hpa["minReplicas"] == 3 and hpa["maxReplicas"] >= 3
    assert "sessionAffinity" not in objects[f"Service/{app}"]["spec"]
    redis_service = objects[f"Service/{app}-redis"]
    assert redis_service["spec"]["selector"] == objects[f"Deployment/{app}-redis"]["spec"]["selector"]["matchLabels"]
    assert "secret" not in yaml.safe_dump(objects[f"Deployment/{app}"]).lower().replace("secretkeyref", "").replace(
        f"{app}-session", ""
    ).replace("ngym_session_secret", "")  # a reference, never a value


def test_k8s_affinity_env_gets_client_ip_and_cookie_ingress_and_no_redis() -> None:
    objects = k8s_objects(PINNED)
    app = PINNED.app
    assert f"Deployment/{app}-redis" not in objects
    service = objects[f"Service/{app}"]["spec"]
    assert service["sessionAffinity"] == "ClientIP"
    ingress = objects[f"Ingress/{app}"]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/affinity"] == "cookie"
    container = objects[f"Deployment/{app}"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "NGYM_SESSION_STORE", "value": "memory"} in container["env"]


def test_compose_has_replicas_redis_secret_env_file_and_healthchecks() -> None:
    files = render_compose(SHARED)
    assert set(files) == {"compose.yaml", "lb/Dockerfile", "lb/nginx.conf", "redis/Dockerfile"}
    services = yaml.safe_load(files["compose.yaml"])["services"]
    assert set(services) == {"redis", "env", "lb"}
    env = services["env"]
    assert env["image"] == SHARED.image and env["deploy"]["replicas"] == 3
    assert env["env_file"] == [ENV_FILE] and "NGYM_SESSION_SECRET" not in files["compose.yaml"].split("ngym.env")[-1]
    assert env["environment"]["NGYM_SESSION_STORE"] == "redis://redis:6379/0"
    assert env["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "/health" in " ".join(env["healthcheck"]["test"])
    assert services["redis"]["healthcheck"]["test"][-1] == "ping"
    assert services["redis"]["build"]["args"]["BASE_IMAGE"] == SHARED.base_image
    assert services["lb"]["ports"] == ["${NGYM_BIND:-0.0.0.0}:${NGYM_PORT:-8000}:8000"] and "ports" not in env
    assert "FROM ${BASE_IMAGE}" in files["redis/Dockerfile"] and "redis-server" in files["redis/Dockerfile"]
    conf = files["lb/nginx.conf"]
    assert "server env:8000" in conf and "hash $ngym_key;" in conf and " consistent;" not in conf
    # any replica for NeMo Gym's wire (a random key per request); ORS sessions by id, OpenEnv by client address
    assert "default $request_id;" in conf and '"~^(?<ors>[^|]+)\\|" $ors;' in conf and "$remote_addr;" in conf


def test_compose_for_an_affinity_env_pins_rollouts_and_has_no_redis() -> None:
    files = render_compose(PINNED)
    services = yaml.safe_load(files["compose.yaml"])["services"]
    assert "redis" not in services and "redis/Dockerfile" not in files
    assert services["env"]["environment"]["NGYM_SESSION_STORE"] == "memory"
    conf = render_nginx_conf(PINNED)
    assert "hash $ngym_affinity;" in conf and " consistent;" not in conf  # consistent: round robin over replicas
    assert "~^/ng-rollout/(?<rollout>[^/]+)/ $rollout;" in conf


def test_nginx_skips_a_dead_replica_and_replays_only_calls_safe_to_repeat() -> None:
    conf = render_nginx_conf(SHARED)
    # a killed container's address never refuses a connection: the default 60 s connect timeout would hang calls
    assert conf.count("proxy_connect_timeout 2s;") == 2
    assert "zone ngym 64k;" in conf and "max_fails=1 fail_timeout=10s" in conf
    assert conf.count("proxy_next_upstream_tries 3;") == 2
    default, replayable = conf.split("location / {")[1].split("location ~ ")
    # tool calls and /verify already sent are never replayed: their effect may already be saved in Redis
    assert "proxy_next_upstream error timeout;" in default and "non_idempotent" not in default
    # a repeated seed only leaves an orphan session, a repeated close is a no-op: replayed on the next replica
    assert replayable.startswith("(^|/)(seed_session|close_session)$ {")
    assert "proxy_next_upstream error timeout non_idempotent;" in replayable
    assert REPLAYABLE_CALLS == ("seed_session", "close_session")
    # with affinity the dead replica's sessions are gone: nothing sent is replayed elsewhere
    pinned = render_nginx_conf(PINNED)
    assert "non_idempotent" not in pinned and "proxy_next_upstream error timeout;" in pinned


def test_many_replicas_raise_the_hpa_ceiling_and_a_bad_count_is_a_config_error() -> None:
    spec = deploy_spec("example_session_state_mgmt", "img:1", replicas=12, base_image="base:1")
    hpa = yaml.safe_load(render_k8s(spec)["k8s/hpa.yaml"].split("---")[0])["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (12, 24)
    assert deploy_spec("example_session_state_mgmt", "img:1", replicas=3, base_image="base:1").max_replicas == 10
    with pytest.raises(ConfigError, match="replicas must be >= 1 and <= max_replicas"):
        DeploySpec(env_name="e", image="i", replicas=11)


def test_rendering_is_pure() -> None:
    assert render_compose(SHARED) == render_compose(SHARED) and render_k8s(PINNED) == render_k8s(PINNED)


def test_write_manifests_keeps_the_secret_across_regenerations(tmp_path: Path) -> None:
    written = write_manifests(SHARED, tmp_path, compose=True, k8s=True)
    assert {p.relative_to(tmp_path).as_posix() for p in written} >= {"compose.yaml", "ngym.env", "k8s/deployment.yaml"}
    secret = (tmp_path / ENV_FILE).read_text()
    assert len(secret.split("NGYM_SESSION_SECRET=")[1].strip()) == 64
    assert (tmp_path / ENV_FILE).stat().st_mode & 0o077 == 0
    write_manifests(SHARED, tmp_path, compose=True, k8s=False)
    assert (tmp_path / ENV_FILE).read_text() == secret


def _has_compose_plugin() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.parametrize("spec", [SHARED, PINNED], ids=["shared", "affinity"])
def test_compose_file_passes_the_compose_tool_when_installed(tmp_path: Path, spec: DeploySpec) -> None:
    write_manifests(spec, tmp_path, compose=True, k8s=False)
    if shutil.which("docker-compose"):
        cmd = ["docker-compose", "-f", str(tmp_path / "compose.yaml"), "config", "-q"]
    elif (
        shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        cmd = ["docker", "compose", "-f", str(tmp_path / "compose.yaml"), "config", "-q"]
    else:
        pytest.skip("no docker-compose / docker compose installed")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_affinity_is_read_from_the_environment_class() -> None:
    assert env_needs_affinity("example_session_state_mgmt") is False  # session_state_model = CounterState
    assert env_needs_affinity("example_single_tool_call") is True  # no session_state_model

    class Live:
        session_state_model = object
        session_affinity_required = True

    assert needs_affinity(Live)


def test_cli_writes_manifests_without_building(tmp_path: Path) -> None:
    from ngym.cli.containerize import containerize

    runner = CliRunner()
    deploy = tmp_path / "deploy"
    result = runner.invoke(
        containerize,
        [
            "example_session_state_mgmt",
            "--output",
            str(tmp_path / "ctx"),
            "--no-build",
            "--compose",
            "--k8s",
            "--replicas",
            "4",
            "--deploy-dir",
            str(deploy),
            "--python-version",
            "3.11",
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"deploy manifests written to {deploy}" in result.output
    services = yaml.safe_load((deploy / "compose.yaml").read_text())["services"]
    assert services["env"]["deploy"]["replicas"] == 4
    assert (deploy / "k8s" / "hpa.yaml").is_file() and (deploy / ENV_FILE).is_file()
    code_wheels = [p.name for p in (tmp_path / "ctx" / "wheelhouse" / "code").iterdir()]
    assert any(name.startswith("ngym_redis-") for name in code_wheels), code_wheels  # the store is in the image
    deps = [p.name for p in (tmp_path / "ctx" / "wheelhouse" / "deps").iterdir()]
    # redis needs async-timeout on Python < 3.11.3 (the base image's Debian python3 is 3.11.2), whatever the host's
    assert any(name.startswith("async_timeout-") for name in deps), deps
