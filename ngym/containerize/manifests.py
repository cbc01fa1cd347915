"""Deploy manifests for an environment's image: a Compose project and Kubernetes manifests. Pure renderers.

``render_compose(spec)`` and ``render_k8s(spec)`` return ``{relative path: file text}`` and depend on nothing
but the ``DeploySpec``; ``write_manifests`` writes them (and, once, a random session secret into the env file).

Shareable environments (serialisable session state) run N replicas behind one address, every replica on one
Redis (the ngym-redis session store) with one session secret, so any replica serves any request of any
rollout. Environments that need session affinity (live per-session state: ``session_affinity_required``, or
no ``session_state_model``) keep the memory store; their traffic is pinned instead: Compose's load balancer
hashes the ``/ng-rollout/<id>/`` path prefix (else the client address), Kubernetes uses ``ClientIP``
affinity on the Service and a cookie-affinity Ingress (ingress-nginx annotations).
"""

from __future__ import annotations

import secrets
from importlib import metadata
from pathlib import Path
from typing import Any

from ngym.containerize.deploy import (
    COMPOSE_FILE,
    ENV_FILE,
    LB_PORT,
    REDIS_PORT,
    SECRET_ENV,
    STORE_ENV,
    DeploySpec,
    _dump,
    _header,
)
from ngym.containerize.errors import PluginSourceError
from ngym.containerize.k8s import k8s_documents, render_k8s
from ngym.containerize.spec import DistributionSource, RunOptions, distribution_source_dir
from ngym.targets import installed

# ---- Compose ---------------------------------------------------------------------------------------------


REDIS_DOCKERFILE = """\
# Redis from Debian's package on the same base image as the environment (no registry pull needed).
ARG BASE_IMAGE={base}
FROM ${{BASE_IMAGE}}
RUN apt-get update \\
 && apt-get install -y --no-install-recommends redis-server \\
 && rm -rf /var/lib/apt/lists/*
USER redis
EXPOSE {port}
CMD ["redis-server", "--bind", "0.0.0.0", "--port", "{port}", "--protected-mode", "no", \\
     "--save", "", "--appendonly", "no"]
"""

LB_DOCKERFILE = """\
# The replicas' one address: nginx from Debian's package on the environment's base image.
ARG BASE_IMAGE={base}
FROM ${{BASE_IMAGE}}
RUN apt-get update \\
 && apt-get install -y --no-install-recommends nginx-light \\
 && rm -rf /var/lib/apt/lists/*
COPY nginx.conf /etc/nginx/nginx.conf
EXPOSE {port}
CMD ["nginx", "-g", "daemon off;"]
"""


#: Calls nginx may replay on another replica even after sending them: a replayed seed leaves an orphan session
#: (closed by idle expiry), a replayed close is answered as already closed. Tool calls and /verify are not
#: replayed: the dead replica may have saved their effect just before dying, and a second run would change the
#: rollout's state or reward without anyone noticing (measured: `proxy_next_upstream ... non_idempotent` on
#: every call gave a wrong reward in 2 of 6 kills under load); they fail with 502 instead, visibly.
REPLAYABLE_CALLS = ("seed_session", "close_session")


#: Why the hash is not ``consistent``: nginx's consistent hash places its points by each ``server`` line's name, and
#: ``env:PORT`` is one name for every replica (Compose's DNS gives all their addresses), so it picked the name and
#: then went round robin over the addresses: half of a 2-replica rollout's calls reached the other replica (410).
#: The plain hash picks an address (nginx resolves the replicas once, at start: there is nothing to keep consistent).
_NOT_CONSISTENT = "\n    # (not `consistent`: one server name for every replica, see ngym.containerize.manifests)"


def render_nginx_conf(spec: DeploySpec) -> str:
    """nginx in front of the replicas: any replica for NeMo Gym's wire (shared store; ORS sessions and OpenEnv
    episodes held over HTTP, which live in one replica's memory, still pinned), or hashed per rollout (affinity).

    A replica that dies is skipped: a refused connection or a connect timeout (a killed container's address
    stops answering without refusing, hence the short ``proxy_connect_timeout``) passes the call to the next
    replica before anything was sent. A call already sent to a replica that dies fails with 502, except the
    ``REPLAYABLE_CALLS`` with the shared store, which the next replica serves (docs/scale-out.md).
    """
    if spec.affinity:
        balance = f"    hash $ngym_affinity;  # one rollout (or client) -> one replica{_NOT_CONSISTENT}\n"
        mapping = (
            "  # /ng-rollout/<id>/... pins a rollout to one replica; other requests are pinned by client address.\n"
            "  map $uri $ngym_affinity {\n"
            "    ~^/ng-rollout/(?<rollout>[^/]+)/ $rollout;\n"
            "    default $remote_addr;\n"
            "  }\n"
        )
    else:
        balance = f"    hash $ngym_key;  # any replica; an ORS session or OpenEnv episode on its own{_NOT_CONSISTENT}\n"
        mapping = (
            "  # Sessions live in Redis, so any replica serves any request of NeMo Gym's wire (a random key per\n"
            "  # request). An ORS session or an OpenEnv episode held between HTTP requests lives in the replica\n"
            "  # that opened it: an ORS request goes by its X-Session-ID, an OpenEnv one by the client's address\n"
            "  # (its episode ids are made by the replica).\n"
            '  map "$http_x_session_id|$uri" $ngym_key {\n'
            '    "~^(?<ors>[^|]+)\\|" $ors;\n'
            '    "~^\\|/openenv/" $remote_addr;\n'
            "    default $request_id;\n"
            "  }\n"
        )

    def location(match: str, next_upstream: str, comment: str) -> str:
        return (
            f"    # {comment}\n"
            f"    location {match} {{\n"
            "      proxy_pass http://ngym;\n"
            "      proxy_http_version 1.1;\n"
            '      proxy_set_header Connection "";\n'
            "      proxy_set_header Host $host;\n"
            "      proxy_connect_timeout 2s;  # a dead replica's address never refuses: give up on it quickly\n"
            f"      proxy_next_upstream {next_upstream};\n"
            f"      proxy_next_upstream_tries {spec.replicas};\n"
            "      proxy_read_timeout 600s;\n"
            "    }\n"
        )

    locations = location("/", "error timeout", "calls not yet sent to a dead replica go to the next one")
    if not spec.affinity:
        calls = "|".join(REPLAYABLE_CALLS)
        locations += location(
            f"~ (^|/)({calls})$",
            "error timeout non_idempotent",
            "replayed even when sent: a repeated seed leaves an orphan (idle expiry), a repeated close is a no-op",
        )
    return (
        "worker_processes auto;\n"
        "pid /tmp/nginx.pid;\n"
        "events { worker_connections 4096; }\n"
        "http {\n"
        "  access_log off;\n"
        + mapping
        + "  upstream ngym {\n"
        + "    zone ngym 64k;  # the workers share which replicas failed\n"
        + balance
        + f"    server env:{spec.port} max_fails=1 fail_timeout=10s;  # resolves to every replica at start\n"
        "    keepalive 64;\n"
        "  }\n"
        "  server {\n"
        f"    listen {LB_PORT};\n" + locations + "  }\n"
        "}\n"
    )


def compose_document(spec: DeploySpec) -> dict[str, Any]:
    """The Compose file as data (``render_compose`` dumps it)."""
    env_service: dict[str, Any] = {
        "image": spec.image,
        "env_file": [ENV_FILE],
        "environment": {STORE_ENV: "memory" if spec.affinity else f"redis://redis:{REDIS_PORT}/0"},
        "expose": [str(spec.port)],
        "deploy": {"replicas": spec.replicas},
        "healthcheck": {
            "test": [
                "CMD",
                "python3",
                "-c",
                f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{spec.port}/health', timeout=3)",
            ],
            "interval": "5s",
            "timeout": "5s",
            "retries": 5,
            "start_period": "10s",
        },
        "restart": "unless-stopped",
    }
    env_service.update(spec.run_options.settings())  # user and capabilities it declares
    services: dict[str, Any] = {}
    if not spec.affinity:
        services["redis"] = {
            "build": {"context": "redis", "args": {"BASE_IMAGE": spec.base_image}},
            "image": f"{spec.app}-redis:local",
            "healthcheck": {
                "test": ["CMD", "redis-cli", "-p", str(REDIS_PORT), "ping"],
                "interval": "5s",
                "timeout": "3s",
                "retries": 10,
            },
            "restart": "unless-stopped",
        }
        env_service["depends_on"] = {"redis": {"condition": "service_healthy"}}
    services["env"] = env_service
    services["lb"] = {
        "build": {"context": "lb", "args": {"BASE_IMAGE": spec.base_image}},
        "image": f"{spec.app}-lb:local",
        "ports": [f"${{NGYM_BIND:-0.0.0.0}}:${{NGYM_PORT:-{LB_PORT}}}:{LB_PORT}"],
        "depends_on": {"env": {"condition": "service_healthy"}},
        "healthcheck": {
            "test": [
                "CMD",
                "python3",
                "-c",
                f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{LB_PORT}/livez', timeout=3)",
            ],
            "interval": "5s",
            "timeout": "5s",
            "retries": 5,
        },
        "restart": "unless-stopped",
    }
    return {"services": services}


def render_compose(spec: DeploySpec) -> dict[str, str]:
    """``compose.yaml`` plus the Dockerfiles and nginx config it builds (the env file is written separately)."""
    files = {
        COMPOSE_FILE: _header(spec, "Compose project")
        + f"# Up: docker compose up -d (or docker-compose up -d); serves port {LB_PORT} on every interface\n"
        + "# (NGYM_PORT=... for another port, NGYM_BIND=127.0.0.1 for this machine only).\n"
        + f"# The session secret every replica shares is in {ENV_FILE} (keep it; never commit it).\n"
        + _dump(compose_document(spec)),
        "lb/Dockerfile": LB_DOCKERFILE.format(base=spec.base_image, port=LB_PORT),
        "lb/nginx.conf": render_nginx_conf(spec),
    }
    if not spec.affinity:
        files["redis/Dockerfile"] = REDIS_DOCKERFILE.format(base=spec.base_image, port=REDIS_PORT)
    return files


def render_env_file(secret: str) -> str:
    note = "# Shared by every replica: cookies signed by one are accepted by all. Keep it secret.\n"
    return f"{note}{SECRET_ENV}={secret}\n"


# ---- Kubernetes ------------------------------------------------------------------------------------------


# ---- writing ---------------------------------------------------------------------------------------------


def write_manifests(spec: DeploySpec, directory: Path, *, compose: bool, k8s: bool) -> list[Path]:
    """Write the chosen manifests under ``directory``; returns the paths written.

    With Compose, ``ngym.env`` gets a fresh random session secret the first time and is kept afterwards
    (regenerating the manifests must not log every live rollout out).
    """
    files: dict[str, str] = {}
    if compose:
        files.update(render_compose(spec))
    if k8s:
        files.update(render_k8s(spec))
    written = []
    for relative, text in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    if compose:
        env_file = directory / ENV_FILE
        if not env_file.exists():
            env_file.write_text(render_env_file(secrets.token_hex(32)))
            env_file.chmod(0o600)
        written.append(env_file)
    return written


def needs_affinity(server_cls: type) -> bool:
    """True when an environment's session state cannot live in a shared store."""
    return bool(getattr(server_cls, "session_affinity_required", False)) or (
        getattr(server_cls, "session_state_model", None) is None
    )


__all__ = [
    "ENV_FILE",
    "DeploySpec",
    "REPLAYABLE_CALLS",
    "compose_document",
    "deploy_spec",
    "env_needs_affinity",
    "session_store_source",
    "k8s_documents",
    "needs_affinity",
    "render_compose",
    "render_env_file",
    "render_k8s",
    "render_nginx_conf",
    "write_manifests",
]


# ---- the impure edges the pipeline calls -----------------------------------------------------------------

#: The distribution of the Redis session store plugin that shareable deployments put in the image.
STORE_DISTRIBUTION = "ngym-redis"


def env_needs_affinity(env_name: str) -> bool:
    """Whether the installed environment ``env_name`` needs session affinity (imports its class)."""
    return needs_affinity(installed(env_name).server_class)


def deploy_spec(
    env_name: str, image: str, *, replicas: int, base_image: str, run_options: RunOptions = RunOptions()
) -> DeploySpec:
    """The ``DeploySpec`` of an installed environment's image; the HPA may grow to twice ``replicas`` (at least 10)."""
    return DeploySpec(
        env_name=env_name,
        image=image,
        replicas=replicas,
        affinity=env_needs_affinity(env_name),
        base_image=base_image,
        max_replicas=max(DeploySpec.max_replicas, 2 * replicas),
        run_options=run_options,
    )


def session_store_source() -> Any:  # DistributionSource
    """The installed ngym-redis plugin, to build into the image (a clear error when it is not installed)."""

    try:
        dist = metadata.distribution(STORE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise PluginSourceError(
            f"replicas share sessions through Redis, so the image needs {STORE_DISTRIBUTION}: "
            "pip install ./plugins/ngym_redis (or `make install`)"
        ) from None
    return DistributionSource(STORE_DISTRIBUTION, dist.version, distribution_source_dir(dist))
