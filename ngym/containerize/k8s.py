"""Kubernetes manifests of an environment's image: Deployment, Service, HPA, and Redis or an affinity Ingress.

``render_k8s(spec)`` returns ``{relative path: file text}`` and depends on nothing but the ``DeploySpec``.
"""

from __future__ import annotations

from typing import Any

from ngym.containerize.deploy import K8S_DIR, REDIS_PORT, SECRET_ENV, STORE_ENV, DeploySpec, _dump, _header
from ngym.containerize.spec import RunOptions


def _labels(spec: DeploySpec, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": spec.app, "app.kubernetes.io/component": component}


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }


def _k8s_security_context(options: RunOptions) -> dict[str, Any]:
    """Non-root, no privilege escalation; or, for an environment that declares it, root with exactly the
    capabilities it names (math_with_code's sandbox), still without privilege escalation."""
    if not options.user:
        return {"runAsNonRoot": True, "allowPrivilegeEscalation": False}
    context: dict[str, Any] = {"allowPrivilegeEscalation": False}
    if options.user == "root":
        context.update(runAsNonRoot=False, runAsUser=0)
    caps = {k: list(v) for k, v in (("drop", options.cap_drop), ("add", options.cap_add)) if v}
    if caps:
        context["capabilities"] = caps
    return context


def k8s_deployment(
    name: str, labels: dict[str, str], containers: list[dict[str, Any]], replicas: int = 1, **pod: Any
) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods labelled ``labels`` running ``containers`` (``pod``: more pod spec fields,
    e.g. ``volumes``). Every Deployment ngym writes (an environment's, its Redis, a fleet's head server) is this."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": containers, **pod}},
        },
    }


def k8s_service(name: str, labels: dict[str, str], port_name: str, port: int) -> dict[str, Any]:
    """A Service selecting the pods labelled ``labels``: ``port`` to their port named ``port_name``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": port_name, "port": port, "targetPort": port_name}]},
    }


def k8s_documents(spec: DeploySpec) -> dict[str, list[dict[str, Any]]]:
    """The Kubernetes objects, by file name (``render_k8s`` dumps them)."""
    labels = _labels(spec, "env")
    env: list[dict[str, Any]] = [
        {"name": SECRET_ENV, "valueFrom": {"secretKeyRef": {"name": spec.secret_name, "key": SECRET_ENV}}},
        {"name": STORE_ENV, "value": "memory" if spec.affinity else spec.redis_url},
    ]
    container = {
        "name": "env",
        "image": spec.image,
        "ports": [{"name": "http", "containerPort": spec.port}],
        "env": env,
        # Ready only while the session store answers (/health reads it); alive while the process serves.
        "readinessProbe": _probe("/health", 5, 2),
        "livenessProbe": _probe("/livez", 10, 3),
        "startupProbe": _probe("/livez", 2, 30),
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": _k8s_security_context(spec.run_options),
    }
    deployment = k8s_deployment(spec.app, labels, [container], spec.replicas, terminationGracePeriodSeconds=30)
    service = k8s_service(spec.app, labels, "http", spec.port)
    if spec.affinity:
        service["spec"]["sessionAffinity"] = "ClientIP"
        service["spec"]["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 10800}}
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": spec.app, "labels": labels},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.app},
            "minReplicas": spec.replicas,
            "maxReplicas": spec.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": spec.cpu_target},
                    },
                }
            ],
        },
    }
    docs: dict[str, list[dict[str, Any]]] = {
        "deployment.yaml": [deployment],
        "service.yaml": [service],
        "hpa.yaml": [hpa],
    }
    if spec.affinity:
        docs["ingress.yaml"] = [
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "Ingress",
                "metadata": {
                    "name": spec.app,
                    "labels": labels,
                    "annotations": {
                        # ingress-nginx cookie affinity: a rollout's calls stay on the replica that holds it.
                        "nginx.ingress.kubernetes.io/affinity": "cookie",
                        "nginx.ingress.kubernetes.io/affinity-mode": "persistent",
                        "nginx.ingress.kubernetes.io/session-cookie-name": "ngym-route",
                        "nginx.ingress.kubernetes.io/session-cookie-max-age": "10800",
                    },
                },
                "spec": {
                    "ingressClassName": "nginx",
                    "rules": [
                        {
                            "http": {
                                "paths": [
                                    {
                                        "path": "/",
                                        "pathType": "Prefix",
                                        "backend": {"service": {"name": spec.app, "port": {"name": "http"}}},
                                    }
                                ]
                            }
                        }
                    ],
                },
            }
        ]
    else:
        redis_labels = _labels(spec, "redis")
        redis_name = f"{spec.app}-redis"
        docs["redis.yaml"] = [
            k8s_deployment(
                redis_name,
                redis_labels,
                [
                    {
                        "name": "redis",
                        "image": spec.redis_image,
                        "args": ["--save", "", "--appendonly", "no"],
                        "ports": [{"name": "redis", "containerPort": REDIS_PORT}],
                        "readinessProbe": {"exec": {"command": ["redis-cli", "ping"]}, "periodSeconds": 5},
                        "livenessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 10},
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    }
                ],
            ),
            k8s_service(redis_name, redis_labels, "redis", REDIS_PORT),
        ]
    return docs


def render_k8s(spec: DeploySpec) -> dict[str, str]:
    """``k8s/*.yaml``: Deployment, Service, HPA, and Redis (shared store) or an affinity Ingress."""
    secret_hint = (
        f"# Needs the Secret {spec.secret_name}: kubectl create secret generic {spec.secret_name} "
        f"--from-literal={SECRET_ENV}=$(openssl rand -hex 32)\n"
    )
    files = {}
    for name, documents in k8s_documents(spec).items():
        body = "---\n".join(_dump(doc) for doc in documents)
        files[f"{K8S_DIR}/{name}"] = _header(spec, "Kubernetes manifests") + secret_hint + body
    return files
