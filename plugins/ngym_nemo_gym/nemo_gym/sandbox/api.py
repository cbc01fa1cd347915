"""``AsyncSandbox``: one sandbox held by an environment, backed by a provider."""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from nemo_gym.sandbox.providers import create_provider
from nemo_gym.sandbox.providers.base import (
    ConnectableProvider,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxProvider,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPauseResume,
)


class AsyncSandbox:
    """``AsyncSandbox({"docker": {}}, spec)``: ``await start()``, ``await exec(cmd)``, ``await stop()``
    (``async with`` stops it on the way out; it does not start it).
    With ``owns_provider=False`` the caller closes a shared provider itself."""

    def __init__(
        self,
        provider: Mapping[str, Any] | SandboxProvider,
        spec: SandboxSpec | None = None,
        *,
        owns_provider: bool = True,
    ):
        self._provider: SandboxProvider = create_provider(provider) if isinstance(provider, Mapping) else provider
        self._owns_provider = owns_provider
        self._spec = spec
        self._handle: SandboxHandle | None = None
        self._stopped = True
        self._closed = False
        self._connected = False

    @property
    def spec(self) -> SandboxSpec | None:
        return self._spec

    @property
    def handle(self) -> SandboxHandle | None:
        return self._handle

    def _live_handle(self) -> SandboxHandle:
        if self._handle is None or self._stopped:
            raise RuntimeError("Sandbox has not been started")
        return self._handle

    async def start(self, spec: SandboxSpec | None = None) -> AsyncSandbox:
        if self._closed:
            raise RuntimeError("Sandbox has been stopped")
        if self._handle is not None and not self._stopped:
            raise RuntimeError("Sandbox is already started")
        spec = spec if spec is not None else self._spec
        if spec is None:
            raise ValueError("Sandbox.start() requires a SandboxSpec")
        self._handle, self._spec, self._stopped = await self._provider.create(spec), spec, False
        try:
            if spec.files:  # written through the provider's upload, as files of the new sandbox
                with tempfile.TemporaryDirectory(prefix="ngym-sandbox-upload-") as scratch:
                    for index, (target, contents) in enumerate(spec.files.items()):
                        source = Path(scratch) / f"file-{index}"
                        source.write_text(contents, encoding="utf-8")
                        await self._provider.upload_file(self._handle, source, target)
        except BaseException:
            await self.stop()
            raise
        return self

    async def start_with_setup(
        self, spec: SandboxSpec | None, setup: Callable[[AsyncSandbox], Awaitable[None]]
    ) -> AsyncSandbox:
        """Start, then run ``setup``; a failing setup stops the sandbox before its error propagates."""
        await self.start(spec)
        try:
            await setup(self)
        except BaseException:
            await self.stop()
            raise
        return self

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = 180,
        user: str | int | None = None,
        preserve_background_services: bool = False,
    ) -> SandboxExecResult:
        workdir = cwd if cwd is not None else (self._spec.workdir if self._spec is not None else None)
        return await self._provider.exec(
            self._live_handle(), command, cwd=workdir, env=env, timeout_s=timeout_s, user=user
        )

    async def upload(self, local_path: Path | str, remote_path: str) -> None:
        await self._provider.upload_file(self._live_handle(), Path(local_path), remote_path)

    async def download(self, remote_path: str, local_path: Path | str) -> None:
        await self._provider.download_file(self._live_handle(), remote_path, Path(local_path))

    async def status(self) -> SandboxStatus:
        if self._handle is None:
            return SandboxStatus.UNKNOWN
        if self._stopped:
            return SandboxStatus.STOPPED
        return await self._provider.status(self._handle)

    async def endpoint(self, port: int) -> SandboxEndpoint:
        declared = self._spec.ports if self._spec is not None else ()
        if port not in declared:
            raise ValueError(f"Sandbox port {port} was not declared in SandboxSpec.ports; declared: {list(declared)}")
        if not isinstance(self._provider, SupportsSandboxEndpoint):
            raise NotImplementedError(f"Sandbox provider {self._provider.name!r} does not support service endpoints")
        return await self._provider.endpoint(self._live_handle(), port)

    async def pause(self) -> None:
        if not isinstance(self._provider, SupportsSandboxPauseResume):
            raise NotImplementedError(f"Sandbox provider {self._provider.name!r} does not support pause/resume")
        await self._provider.pause(self._live_handle())

    async def resume(self) -> None:
        if not isinstance(self._provider, SupportsSandboxPauseResume):
            raise NotImplementedError(f"Sandbox provider {self._provider.name!r} does not support pause/resume")
        await self._provider.resume(self._live_handle())

    async def stop(self) -> None:
        """Close the sandbox (and the provider, when this sandbox owns it). Idempotent."""
        if self._closed:
            return
        try:
            if self._handle is not None and not self._stopped:
                await self._provider.close(self._handle)
        finally:
            self._stopped, self._closed = True, True
            if self._owns_provider:
                await self._provider.aclose()

    async def serialize(self, *, scope: str | None = None) -> dict[str, Any]:
        """A JSON descriptor another process rebuilds this sandbox from with :meth:`connect` (providers that
        support it: ``docker``)."""
        if not isinstance(self._provider, ConnectableProvider):
            raise RuntimeError(f"provider {self._provider.name!r} does not support serialize()/connect()")
        descriptor = dict(await self._provider.serialize_handle(self._live_handle(), scope=scope))
        if self._spec is not None:
            descriptor.setdefault("workdir", self._spec.workdir)
            if self._spec.ports:
                descriptor.setdefault("ports", list(self._spec.ports))
        return descriptor

    @classmethod
    async def connect(
        cls, descriptor: Mapping[str, Any], *, provider: SandboxProvider, owns_provider: bool = True
    ) -> AsyncSandbox:
        """The running sandbox ``descriptor`` (from :meth:`serialize`) names, reached through ``provider``.
        ``stop()`` stops it; ``disconnect()`` lets go of it and leaves it running."""
        if not isinstance(provider, ConnectableProvider):
            raise RuntimeError(f"provider {getattr(provider, 'name', provider)!r} does not support connect()")
        handle = await provider.connect(descriptor)
        spec = SandboxSpec(workdir=descriptor.get("workdir"), ports=tuple(descriptor.get("ports") or ()))
        sandbox = cls(provider, spec, owns_provider=owns_provider)
        sandbox._handle, sandbox._stopped, sandbox._connected = handle, False, True
        return sandbox

    async def disconnect(self) -> None:
        """Let go of a sandbox reached with :meth:`connect`, leaving it running (whoever started it stops it)."""
        if self._closed:
            return
        if not self._connected:
            raise RuntimeError("disconnect() is for a sandbox reached with connect(); stop() this one")
        self._handle, self._stopped, self._closed = None, True, True
        if self._owns_provider:
            await self._provider.aclose()

    async def __aenter__(self) -> AsyncSandbox:
        return self  # as NeMo Gym's: entering does not start it; leaving stops it

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
