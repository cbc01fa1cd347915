"""The Compose file ``AsyncSandboxCompose`` hands to ``docker compose`` (pure functions).

The input is NeMo Gym's *resolved* Compose document, as terminal_bench_4's ``resolve_compose`` writes it:
``environment``/``labels``/``depends_on``/``healthcheck`` as mappings, ``ports``/``volumes`` as lists of
mappings, every service with a prebuilt ``image``, ``$`` already literal. NeMo Gym 0.7.0 runs such a document on
sandbox providers; here Docker Compose runs it, so the fields keep their Compose meaning and only these change:

- each service's ``SandboxSpec`` (``service_specs``) is merged in, the Compose fields winning, as in NeMo Gym:
  ``env`` under ``environment``, ``metadata`` under ``labels``, ``workdir`` as ``working_dir``, resources as
  ``cpus``/``mem_limit``;
- published ports get an ephemeral host port on 127.0.0.1 (``sandbox.endpoint(port)`` reports it): a fixed host
  port would clash between concurrent sessions, and NeMo Gym refuses one too;
- ``x-sandbox`` (NeMo's per-service hosts and URL rewriting) is checked and dropped: Compose's network resolves
  every service and alias by name already;
- every ``$`` is written as ``$$``: the document is literal, and Compose would otherwise substitute variables
  from the host's environment;
- for Compose v1 (``docker-compose`` 1.x) the options it predates (``healthcheck.start_interval``,
  ``depends_on.*.required``) are left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nemo_gym.sandbox.providers.base import SandboxResources, SandboxSpec

TOP_LEVEL = {"name", "services", "networks", "volumes"}
#: NeMo Gym 0.7.0's set, plus what Compose itself runs without help (none of these needs a provider feature here).
SERVICE_FIELDS = {
    "image",
    "entrypoint",
    "command",
    "environment",
    "working_dir",
    "user",
    "depends_on",
    "healthcheck",
    "expose",
    "ports",
    "networks",
    "volumes",
    "cpus",
    "mem_limit",
    "labels",
    "restart",
    "network_mode",
    "cap_add",
    "shm_size",
    "x-sandbox",
}
_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


def render_compose_file(
    document: Any,
    service_specs: Mapping[str, SandboxSpec] | None = None,
    *,
    volume_sources: Mapping[str, str] | None = None,
    legacy: bool = False,
) -> dict[str, Any]:
    """The document ``docker compose -f`` runs; ``ValueError`` for a malformed one, ``NotImplementedError`` for
    a field NeMo Gym's Compose support does not have either."""
    if not isinstance(document, Mapping):
        raise ValueError("Compose requires a mapping")
    unknown = set(document) - TOP_LEVEL
    if unknown:
        raise NotImplementedError(f"Unsupported Compose fields: {sorted(unknown)}")
    services = document.get("services")
    if not isinstance(services, Mapping) or not services:
        raise ValueError("Compose requires a non-empty services mapping")
    for field in ("networks", "volumes"):
        if not isinstance(document.get(field) or {}, Mapping):
            raise ValueError(f"Compose {field} requires a mapping")
    specs = dict(service_specs or {})
    out: dict[str, Any] = {
        "services": {
            name: _service(name, service, specs.get(name), services, dict(volume_sources or {}), legacy)
            for name, service in services.items()
        }
    }
    for field in ("networks", "volumes"):
        if document.get(field):
            out[field] = dict(document[field])
    return {key: _literal(value) for key, value in out.items()}


def declared_ports(service: Mapping[str, Any]) -> tuple[int, ...]:
    """The TCP ports a service declares (``expose`` and ``ports`` targets): what ``sandbox.endpoint`` accepts."""
    ports = [int(str(port).removesuffix("/tcp")) for port in service.get("expose") or []]
    ports += [int(port["target"]) for port in service.get("ports") or []]
    return tuple(dict.fromkeys(ports))


def _service(
    name: str,
    service: Any,
    spec: SandboxSpec | None,
    services: Mapping[str, Any],
    volume_sources: dict[str, str],
    legacy: bool,
) -> dict[str, Any]:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"Invalid Compose service name: {name!r}")
    if not isinstance(service, Mapping):
        raise ValueError(f"Service {name!r} requires a mapping")
    unknown = set(service) - SERVICE_FIELDS
    if unknown:
        raise NotImplementedError(f"Service {name!r}: unsupported Compose fields {sorted(unknown)}")
    for field in ("environment", "depends_on", "networks", "healthcheck", "labels", "x-sandbox"):
        if not isinstance(service.get(field) or {}, Mapping):
            raise ValueError(f"Service {name!r}: resolve {field} to a mapping upstream")
    for field in ("ports", "volumes"):
        items = service.get(field) or []
        if not isinstance(items, list) or any(not isinstance(item, Mapping) for item in items):
            raise ValueError(f"Service {name!r}: resolve {field} to a list of mappings upstream")
    if not service.get("image"):
        raise ValueError(f"Service {name!r} requires a prebuilt image in the Compose YAML")
    _check_x_sandbox(name, service.get("x-sandbox") or {})
    spec = spec or SandboxSpec()
    out = {key: value for key, value in service.items() if key != "x-sandbox"}
    environment = {**spec.env, **(service.get("environment") or {})}
    # `KEY: null` would make Compose copy the host's variable in; NeMo Gym leaves such a variable unset
    out["environment"] = {str(k): str(v) for k, v in environment.items() if v is not None}
    out["labels"] = {str(k): str(v) for k, v in {**spec.metadata, **(service.get("labels") or {})}.items()}
    if "working_dir" not in service and spec.workdir:
        out["working_dir"] = spec.workdir
    resources = spec.resources if isinstance(spec.resources, SandboxResources) else SandboxResources()
    if "cpus" not in service and resources.cpu:
        out["cpus"] = float(resources.cpu)
    if "mem_limit" not in service and resources.memory_mib:
        out["mem_limit"] = int(resources.memory_mib) * 1024 * 1024
    if service.get("ports"):
        out["ports"] = [_port(name, port) for port in service["ports"]]
    if service.get("volumes"):
        out["volumes"] = [_volume(name, volume, volume_sources) for volume in service["volumes"]]
    if service.get("depends_on"):
        out["depends_on"] = {
            dep: _dependency(name, dep, options, services, legacy) for dep, options in service["depends_on"].items()
        }
    if service.get("healthcheck") and legacy:
        out["healthcheck"] = {k: v for k, v in service["healthcheck"].items() if k != "start_interval"}
    return out


def _check_x_sandbox(name: str, options: Mapping[str, Any]) -> None:
    if set(options) - {"hosts", "resolve_environment"}:
        raise NotImplementedError(f"Service {name!r}: unsupported x-sandbox options")
    selected = options.get("resolve_environment", [])
    if not isinstance(selected, list) or any(not isinstance(key, str) for key in selected):
        raise ValueError("x-sandbox.resolve_environment requires a list of environment variable names")
    if "hosts" in options and options["hosts"] != []:
        raise ValueError("x-sandbox.hosts only supports [] to explicitly disable host injection")


def _port(name: str, port: Mapping[str, Any]) -> str:
    if set(port) - {"target", "published", "host_ip", "protocol", "mode"}:
        raise NotImplementedError(f"Service {name!r}: unsupported ports options")
    if port.get("published") not in (None, "0", 0) or port.get("host_ip"):
        raise NotImplementedError("Fixed published ports/host_ip cannot be honored by sandbox endpoints")
    if port.get("protocol", "tcp") != "tcp" or port.get("mode", "ingress") != "ingress":
        raise NotImplementedError("Only TCP sandbox endpoint ports are supported")
    # the short form: Compose v1 has no host_ip in the long one
    return f"127.0.0.1::{int(port['target'])}/tcp"


def _volume(name: str, volume: Mapping[str, Any], volume_sources: dict[str, str]) -> dict[str, Any]:
    if volume.get("type") not in {"bind", "volume"}:
        raise NotImplementedError("Only normalized bind and named volumes are supported")
    if set(volume) - {"type", "source", "target", "read_only", "bind", "volume"}:
        raise NotImplementedError("Unsupported Compose volume options")
    if not volume.get("source") or not str(volume.get("target", "")).startswith("/"):
        raise ValueError(f"Service {name!r}: volumes require a source and absolute target")
    out = dict(volume)
    if volume["type"] == "bind" and volume["source"] in volume_sources:
        out["source"] = volume_sources[volume["source"]]
    return out


def _dependency(name: str, dependency: str, options: Any, services: Mapping[str, Any], legacy: bool) -> dict[str, Any]:
    if not isinstance(options, Mapping):
        raise ValueError(f"Service {name!r}: resolve dependency {dependency!r} options upstream")
    if dependency not in services:
        raise ValueError(f"Service {name!r}: unknown dependency {dependency!r}")
    if (
        set(options) - {"condition", "required", "restart"}
        or options.get("restart")
        or options.get("required") is False
    ):
        raise NotImplementedError(f"Service {name!r}: unsupported depends_on options")
    condition = options.get("condition", "service_started")
    if condition not in {"service_started", "service_healthy", "service_completed_successfully"}:
        raise ValueError(f"Service {name!r}: invalid dependency condition")
    if condition == "service_healthy" and not _has_healthcheck(services[dependency]):
        raise ValueError(f"Service {name!r} requires {dependency!r} healthy, but it has no healthcheck")
    return {"condition": condition} if legacy else dict(options)


def _has_healthcheck(service: Mapping[str, Any]) -> bool:
    health = service.get("healthcheck") or {}
    test = health.get("test") or ["NONE"]
    return not health.get("disable") and (test[0] if isinstance(test, list) else test) != "NONE"


def _literal(value: Any) -> Any:
    """Every string with ``$`` doubled, so Compose substitutes nothing."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [_literal(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _literal(item) for key, item in value.items()}
    return value
