"""A fleet as Kubernetes manifests: each environment's own (from ``ngym containerize``'s renderer) plus the
fleet's head server, serving the global config with every environment at its Service's DNS name.

``ngym up`` with ``engine: kubernetes`` writes ``.ngym-fleet/<name>/k8s/`` and applies nothing (say
``kubectl apply -R -f`` it): per environment, ``<env>/k8s/*.yaml`` as ``ngym containerize NAME --k8s`` writes
them (a Deployment with readiness/liveness/startup probes, a Service, an HPA; Redis for serialisable state, a
ClientIP-affine Service and a cookie-affine Ingress for in-process state), and ``head.yaml``: a ConfigMap
holding the global config, the head server's Deployment (it runs in the first environment's image, which holds
ngym) and its Service. Images are ``ngym containerize``'s tags (``ngym-<env>:<version>``), or ``image:`` per
environment in ``kubernetes:`` of the fleet file (``{images: {NAME: registry/image:tag}, namespace: ns}``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ngym.containerize.deploy import DeploySpec, _dump
from ngym.containerize.k8s import k8s_deployment, k8s_service, render_k8s
from ngym.containerize.spec import CONTAINER_PORT, LOCAL_BASE_IMAGE, RunOptions
from ngym.fleet.global_config import build_global_config, dump
from ngym.fleet.spec import FleetSpec

HEAD_PORT = 11000
CONFIG_DIR = "/etc/ngym-fleet"


def deploy_specs(spec: FleetSpec, affinity: dict[str, bool], domains: dict[str, str | None]) -> dict[str, DeploySpec]:
    """Each environment's ``DeploySpec`` (``affinity``: whether its state must stay in one process)."""
    images = spec.kubernetes.get("images", {})
    specs = {}
    for name, env in spec.environments.items():
        installed = name if env.is_nemo else env.env
        specs[name] = DeploySpec(
            env_name=name,
            image=images.get(name) or f"ngym-{installed.lower()}:latest",
            replicas=env.replicas,
            affinity=affinity[name],
            base_image=LOCAL_BASE_IMAGE,
            max_replicas=max(DeploySpec.max_replicas, 2 * env.replicas),
            run_options=RunOptions(),
        )
    return specs


def render_fleet(spec: FleetSpec, affinity: dict[str, bool], domains: dict[str, str | None]) -> dict[str, str]:
    """``{relative path: text}`` of the whole fleet (pure: the same inputs always give the same files)."""
    specs = deploy_specs(spec, affinity, domains)
    namespace = spec.kubernetes.get("namespace", "default")
    files: dict[str, str] = {}
    for name, deploy in specs.items():
        for path, text in render_k8s(deploy).items():
            files[f"{name}/{path}"] = text
    head_name = f"ngym-fleet-{spec.name}".lower().replace("_", "-")[:50].rstrip("-")
    addresses = {name: (f"{d.app}.{namespace}.svc.cluster.local", CONTAINER_PORT) for name, d in specs.items()}
    environments_only = spec.model_copy(update={"servers": {}})
    config = build_global_config(
        environments_only, (f"{head_name}.{namespace}.svc.cluster.local", HEAD_PORT), addresses, domains
    )
    files["head.yaml"] = "---\n".join(
        _dump(doc) for doc in head_documents(head_name, dump(config), next(iter(specs.values())).image)
    )
    return files


def head_documents(name: str, config_yaml: str, image: str) -> list[dict[str, Any]]:
    """ConfigMap (the global config), Deployment (the head server) and Service of a fleet's head server."""
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "head-server"}
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 3}
    container = {
        "name": "head",
        "image": image,
        "command": [
            "python",
            "-m",
            "ngym.fleet.head",
            f"{CONFIG_DIR}/global_config.yaml",
            f"{CONFIG_DIR}/server_instances.json",
            "0.0.0.0",
            str(HEAD_PORT),
        ],
        "ports": [{"name": "http", "containerPort": HEAD_PORT}],
        "readinessProbe": probe,
        "livenessProbe": probe,
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "resources": {"requests": {"cpu": "50m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-config", "labels": labels},
            "data": {"global_config.yaml": config_yaml, "server_instances.json": "[]"},
        },
        k8s_deployment(
            name, labels, [container], volumes=[{"name": "config", "configMap": {"name": f"{name}-config"}}]
        ),
        k8s_service(name, labels, "http", HEAD_PORT),
    ]


def manifests_dir(spec: FleetSpec) -> Path:
    """Where ``ngym up`` writes the fleet's manifests: ``<state dir>/k8s``."""
    return spec.state_dir() / "k8s"


def hand_off(spec: FleetSpec) -> list[str]:
    """``ngym up`` of a Kubernetes fleet (the engine's contract, ``ngym.fleet.engines``): write its manifests; the
    lines saying where and how to apply them."""
    directory = manifests_dir(spec)
    written = write_fleet(spec, directory)
    return [
        f"ngym up: fleet {spec.name!r}: wrote {len(written)} Kubernetes manifest file(s) to {directory}",
        f"  apply them with: kubectl apply -R -f {directory}   (and create each environment's Secret, "
        "as its deployment.yaml says)",
    ]


def runner(spec: FleetSpec) -> str:
    """Who runs a Kubernetes fleet (what ``ngym status`` and ``ngym down`` answer)."""
    return f"your Kubernetes cluster: use kubectl (its manifests: {manifests_dir(spec)})"


def write_fleet(spec: FleetSpec, directory: Path) -> list[Path]:
    """Render the fleet's manifests for the installed environments and write them under ``directory``."""
    from ngym.containerize.manifests import env_needs_affinity
    from ngym.targets import resolve

    affinity, domains = {}, {}
    for name, env in spec.environments.items():
        installed = name if env.is_nemo else env.env
        affinity[name] = env_needs_affinity(installed)
        domain = resolve(installed).domain
        domains[name] = getattr(domain, "value", domain)
    written = []
    for relative, text in render_fleet(spec, affinity, domains).items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
