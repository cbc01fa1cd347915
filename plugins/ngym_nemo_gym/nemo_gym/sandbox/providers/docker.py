"""The ``docker`` provider: one long-lived container per sandbox, driven through the Docker SDK.

The container's entrypoint is replaced by a keep-alive (``sleep``, for ``ttl_s`` when given) so commands run with
``exec``; resources become ``nano_cpus`` / ``mem_limit``; the container is removed at close. A command that outlives
its timeout is reported as ``error_type="timeout"`` (the container is removed when the sandbox stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import tarfile
import uuid
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from nemo_gym.sandbox.providers.base import (
    SandboxCreateError,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
)

SANDBOX_RUNTIME_RETURN_CODE = 125
LABEL = "ngym.nemo_gym.sandbox"
_STATUS = {"created": SandboxStatus.STARTING, "running": SandboxStatus.RUNNING, "paused": SandboxStatus.PAUSED}


class DockerProvider:
    name = "docker"

    def __init__(self, default_timeout_s: float = 180.0, network: str | None = None, **_ignored: Any) -> None:
        try:
            import docker
        except ImportError as exc:  # the SDK is an optional dependency: say how to get it
            raise SandboxCreateError("the docker sandbox provider needs the Docker SDK: pip install docker") from exc
        self._docker = docker
        self._client: Any = None
        self._default_timeout_s = default_timeout_s
        self._network = network

    def engine(self) -> Any:
        """The Docker SDK client this provider drives the engine with (made on first use)."""
        if self._client is None:
            try:
                self._client = self._docker.from_env()
            except self._docker.errors.DockerException as exc:
                raise SandboxCreateError(f"cannot reach the Docker engine: {exc}") from exc
        return self._client

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        if spec.image is None:
            raise SandboxCreateError("spec.image is required for the docker provider")
        keep_alive = ["sleep", str(int(spec.ttl_s))] if spec.ttl_s else ["sleep", "infinity"]
        options: dict[str, Any] = {
            "name": f"ngym-sandbox-{uuid.uuid4().hex[:12]}",
            "entrypoint": keep_alive,
            "command": [],
            "detach": True,
            "environment": dict(spec.env),
            "labels": {LABEL: "1", **{str(k): str(v) for k, v in spec.metadata.items()}},
            "working_dir": spec.workdir,
            "network": self._network,
            **_limits(spec.resources if isinstance(spec.resources, SandboxResources) else SandboxResources()),
        }
        try:
            container = await asyncio.to_thread(self.engine().containers.run, spec.image, **options)
        except self._docker.errors.DockerException as exc:
            raise SandboxCreateError(f"cannot start a container from {spec.image!r}: {exc}") from exc
        if spec.workdir:
            await asyncio.to_thread(container.exec_run, ["mkdir", "-p", spec.workdir])
        return SandboxHandle(container.id, self.name, container)

    async def serialize_handle(self, handle: SandboxHandle, *, scope: str | None = None) -> dict[str, Any]:
        """A descriptor another process (or ``AsyncSandboxCompose``) reattaches to the container with."""
        return {"provider": self.name, "container": handle.sandbox_id}

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle:
        """The handle of the running container ``descriptor["container"]`` names (an id or a name)."""
        reference = descriptor.get("container") if isinstance(descriptor, Mapping) else None
        if not isinstance(reference, str) or not reference:
            raise ValueError("a docker sandbox descriptor names its container: {'container': ID}")
        try:
            container = await asyncio.to_thread(self.engine().containers.get, reference)
        except self._docker.errors.NotFound as exc:
            raise SandboxCreateError(f"no container {reference!r} to connect to") from exc
        return SandboxHandle(container.id, self.name, container)

    async def exec(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = None,
        user: str | int | None = None,
    ) -> SandboxExecResult:
        timeout = timeout_s if timeout_s is not None else self._default_timeout_s
        run = handle.raw.exec_run
        call = asyncio.to_thread(
            run, ["/bin/sh", "-c", command], workdir=cwd, environment=env, user=str(user or ""), demux=True
        )
        try:
            code, (stdout, stderr) = await asyncio.wait_for(call, timeout=timeout)
        except TimeoutError:
            message = f"docker command timed out after {timeout:g}s"
            return SandboxExecResult(None, message, SANDBOX_RUNTIME_RETURN_CODE, "timeout")
        except self._docker.errors.DockerException as exc:
            return SandboxExecResult(None, str(exc), SANDBOX_RUNTIME_RETURN_CODE, "sandbox")

        def decode(data: bytes | None) -> str:
            return data.decode(errors="replace") if data else ""

        return SandboxExecResult(decode(stdout), decode(stderr), int(code if code is not None else 0))

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None:
        target = PurePosixPath(target_path)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            archive.add(str(source_path), arcname=target.name)
        await asyncio.to_thread(handle.raw.exec_run, ["mkdir", "-p", str(target.parent)])
        await asyncio.to_thread(handle.raw.put_archive, str(target.parent), buffer.getvalue())

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None:
        stream, _ = await asyncio.to_thread(handle.raw.get_archive, source_path)
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            member = archive.getmembers()[0]
            extracted = archive.extractfile(member)
            if extracted is None:
                raise IsADirectoryError(f"{source_path} is not a file")
            target_path.parent.mkdir(parents=True, exist_ok=True)
            target_path.write_bytes(extracted.read())

    async def endpoint(self, handle: SandboxHandle, port: int) -> SandboxEndpoint:
        """Where ``port`` of the container answers from this host: its published host port when it has one
        (``AsyncSandboxCompose`` publishes declared ports on 127.0.0.1), else the container's own address."""
        container = handle.raw
        await asyncio.to_thread(container.reload)
        settings = container.attrs.get("NetworkSettings") or {}
        for binding in (settings.get("Ports") or {}).get(f"{port}/tcp") or []:
            host = binding.get("HostIp") or "127.0.0.1"
            host = "127.0.0.1" if host == "0.0.0.0" else f"[{host}]" if ":" in host else host
            return SandboxEndpoint(f"http://{host}:{binding['HostPort']}")
        for network in (settings.get("Networks") or {}).values():
            if network.get("IPAddress"):
                return SandboxEndpoint(f"http://{network['IPAddress']}:{port}")
        raise SandboxCreateError(f"container {handle.sandbox_id[:12]} has no address for port {port}")

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        try:
            await asyncio.to_thread(handle.raw.reload)
        except self._docker.errors.NotFound:
            return SandboxStatus.STOPPED
        return _STATUS.get(handle.raw.status, SandboxStatus.STOPPED)

    async def close(self, handle: SandboxHandle) -> None:
        with contextlib.suppress(self._docker.errors.NotFound):
            await asyncio.to_thread(handle.raw.remove, force=True)

    async def aclose(self) -> None:
        if self._client is not None:
            await asyncio.to_thread(self._client.close)
            self._client = None


def _limits(resources: SandboxResources) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if resources.cpu:
        limits["nano_cpus"] = int(resources.cpu * 1e9)
    if resources.memory_mib:
        limits["mem_limit"] = f"{resources.memory_mib}m"
    return limits
