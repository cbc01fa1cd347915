"""Provider-neutral sandbox types and the provider contract (NeMo Gym's names).

A provider creates sandboxes from a :class:`SandboxSpec` and runs commands in them; :class:`AsyncSandbox`
(``nemo_gym.sandbox``) is what environments hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit


class SandboxStatus(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    ERROR = "error"
    UNKNOWN = "unknown"


class SandboxCreateError(RuntimeError):
    """A sandbox could not be created or did not become ready."""


class SandboxCreateVerificationError(SandboxCreateError):
    """A sandbox was created but failed its readiness check."""


class SandboxPtyError(RuntimeError):
    pass


@dataclass(frozen=True)
class SandboxEndpoint:
    """A route to a service inside a sandbox: an absolute URL and the headers it needs."""

    endpoint: str
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        url = self.endpoint.strip() if isinstance(self.endpoint, str) else ""
        parts = urlsplit(url)
        if not parts.scheme or not parts.netloc:
            raise ValueError("Sandbox endpoint must be a non-empty absolute URL")
        object.__setattr__(self, "endpoint", url)
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in dict(self.headers).items()})


@dataclass(frozen=True)
class SandboxResources:
    cpu: float | None = None
    memory_mib: int | None = None
    disk_gib: int | None = None
    gpu: int | None = None
    gpu_type: str | None = None

    @classmethod
    def from_mapping(cls, resources: Mapping[str, Any] | None) -> SandboxResources:
        if resources is None:
            return cls()
        known = {f.name for f in fields(cls)}
        unknown = set(resources) - known
        if unknown:
            unknown_keys, known_keys = ", ".join(sorted(unknown)), ", ".join(sorted(known))
            raise ValueError(f"Unknown sandbox resource keys: {unknown_keys}. Expected keys: {known_keys}")
        casts: dict[str, Any] = {"cpu": float, "memory_mib": int, "disk_gib": int, "gpu": int, "gpu_type": str}
        return cls(**{k: casts[k](v) for k, v in resources.items() if v is not None})


@dataclass(frozen=True)
class SandboxSpec:
    """What to create: image, working directory, environment, files to write, resources, ports."""

    image: str | None = None
    ttl_s: int | float | None = None
    ready_timeout_s: int | float | None = None
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    resources: SandboxResources | Mapping[str, Any] = field(default_factory=SandboxResources)
    entrypoint: list[str] | None = None
    provider_options: dict[str, Any] = field(default_factory=dict)
    ports: tuple[int, ...] | list[int] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.resources, SandboxResources):
            object.__setattr__(self, "resources", SandboxResources.from_mapping(self.resources))
        if not isinstance(self.ports, list | tuple):
            raise TypeError("Sandbox ports must be a list or tuple of TCP port numbers")
        ports: list[int] = []
        for raw in self.ports:
            if isinstance(raw, bool) or not isinstance(raw, int | str):
                raise ValueError(f"Invalid sandbox TCP port: {raw!r}")
            try:
                port = int(raw)
            except ValueError as exc:
                raise ValueError(f"Invalid sandbox TCP port: {raw!r}") from exc
            if not 1 <= port <= 65535:
                raise ValueError(f"Sandbox TCP port must be between 1 and 65535, got {port}")
            if port in ports:
                raise ValueError(f"Duplicate sandbox TCP port: {port}")
            ports.append(port)
        object.__setattr__(self, "ports", tuple(ports))


@dataclass
class SandboxHandle:
    """A created sandbox; ``raw`` is the provider's own state, passed back to it untouched."""

    sandbox_id: str
    provider_name: str
    raw: Any


@dataclass(frozen=True)
class SandboxExecResult:
    """A command's outcome; ``error_type`` names a runtime failure that has no process exit code (a timeout)."""

    stdout: str | None
    stderr: str | None
    return_code: int
    error_type: str | None = None


ExecResult = SandboxExecResult


class SandboxProvider(Protocol):
    name: str

    async def create(self, spec: SandboxSpec) -> SandboxHandle: ...

    async def exec(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = None,
        user: str | int | None = None,
    ) -> SandboxExecResult: ...

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None: ...

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None: ...

    async def status(self, handle: SandboxHandle) -> SandboxStatus: ...

    async def close(self, handle: SandboxHandle) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class SupportsSandboxEndpoint(Protocol):
    async def endpoint(self, handle: SandboxHandle, port: int) -> SandboxEndpoint: ...


@runtime_checkable
class SupportsSandboxPauseResume(Protocol):
    async def pause(self, handle: SandboxHandle) -> None: ...

    async def resume(self, handle: SandboxHandle) -> None: ...


@runtime_checkable
class ConnectableProvider(Protocol):
    """A provider whose sandboxes another process can reach again from a serialisable descriptor."""

    async def serialize_handle(self, handle: SandboxHandle, *, scope: str | None = None) -> dict[str, Any]: ...

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle: ...
