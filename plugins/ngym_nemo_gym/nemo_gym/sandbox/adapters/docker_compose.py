"""``AsyncSandboxCompose``: the services of a Compose file as sandboxes, run by Docker Compose.

NeMo Gym 0.7.0's class takes a resolved Compose file and a provider, starts every service, and hands the
environment one ``AsyncSandbox`` per service (``compose.services["main"].exec(...)``), stopping them all at
``stop()``. NeMo emulates Compose on sandbox providers that can network sandboxes (its ``docker`` provider cannot);
ngym hands the file to Docker Compose itself, which already does what the emulation rebuilds: a project network
where every service and alias resolves by name, ``depends_on`` conditions, healthchecks, volumes, capabilities.

Process model: ``start()`` renders the file (``compose_file.render_compose_file``: service specs merged, ports on
127.0.0.1, ``$`` kept literal) into a scratch folder, runs ``<compose> -p compose-<hex> up -d --no-build`` (the
``docker compose`` plugin, else ``docker-compose``), finds the project's containers by Compose's labels, and
waits until each is running and healthy (or finished with exit 0) within ``timeout_s``. Each service is then an
``AsyncSandbox`` connected to its container through the ``docker`` provider (Docker SDK: exec, upload, download,
endpoint). ``stop()`` runs ``down --volumes`` and removes the scratch folder. Nothing is pulled or built: every
service names an image the engine has.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from nemo_gym.sandbox.adapters.compose_file import declared_ports, render_compose_file
from nemo_gym.sandbox.api import AsyncSandbox
from nemo_gym.sandbox.providers import SandboxCreateError, SandboxProvider, SandboxSpec, create_provider

#: Seconds ``down`` gives a service to stop before killing it (``sleep infinity`` as PID 1 ignores SIGTERM).
STOP_GRACE_S = 2
_LOG_TAIL = 40


@cache
def compose_command() -> tuple[tuple[str, ...], bool]:
    """(the Compose command line, whether it is Compose v1): the ``docker compose`` plugin when it answers,
    else ``docker-compose``."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode == 0:
        return (docker, "compose"), False
    legacy = shutil.which("docker-compose")
    if legacy is None:
        raise SandboxCreateError(
            "AsyncSandboxCompose needs Docker Compose: install the docker compose plugin or docker-compose"
        )
    version = subprocess.run([legacy, "version", "--short"], capture_output=True, text=True, check=False).stdout
    return (legacy,), version.strip().startswith("1.")


@runtime_checkable
class _DrivesDockerEngine(Protocol):
    """The docker provider's side Compose uses: the Docker SDK client it drives the engine with."""

    def engine(self) -> Any: ...


class AsyncSandboxCompose:
    """``AsyncSandboxCompose({"docker": {}}, "compose.yaml", service_specs={...})``: ``await start()``, then
    ``services[name]`` is each service's ``AsyncSandbox``; ``await stop()`` (or ``async with``) removes them all.

    ``service_specs`` give each service's deployment settings (env, metadata, working directory, resources);
    the Compose file's own fields win. ``volume_sources`` maps a bind source to the host path to mount instead.
    ``volume_init_image`` is accepted for NeMo Gym's signature; Compose creates named volumes itself.
    """

    def __init__(
        self,
        provider: Mapping[str, Any] | SandboxProvider,
        compose_file: str | Path | None,
        *,
        service_specs: Mapping[str, SandboxSpec] | None = None,
        timeout_s: float = 1200,
        poll_interval_s: float = 0.5,
        volume_init_image: str = "alpine:3.22",
        volume_sources: Mapping[str, str] | None = None,
    ) -> None:
        if timeout_s <= 0 or poll_interval_s <= 0:
            raise ValueError("Compose timeout_s and poll_interval_s must be positive")
        self._owns_provider = isinstance(provider, Mapping)
        self.provider = create_provider(provider) if isinstance(provider, Mapping) else provider
        self.compose_file = Path(compose_file).resolve() if compose_file is not None else None
        self.document: dict[str, Any] = {}
        self.service_specs = dict(service_specs or {})
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self.volume_init_image = volume_init_image
        self.volume_sources = dict(volume_sources or {})
        self.project = "compose-" + uuid.uuid4().hex
        self.services: dict[str, AsyncSandbox] = {}
        self._scratch: Path | None = None
        self._started = self._ready = self._closed = False
        self._stop_task: asyncio.Task[None] | None = None
        self._waiting = "docker compose up"  # what start() waits for now (named when it times out)

    async def start(self) -> AsyncSandboxCompose:
        if self._started or self._closed:
            raise RuntimeError("Compose collection already started or closed")
        if self.compose_file is None:
            raise ValueError("Starting a Compose collection requires a YAML file")
        if getattr(self.provider, "name", None) != "docker":
            name = getattr(self.provider, "name", type(self.provider).__name__)
            raise NotImplementedError(
                f"Sandbox provider {name!r} does not support networking between sandboxes; "
                "AsyncSandboxCompose runs on the docker provider"
            )
        self._started = True
        try:
            async with asyncio.timeout(self.timeout_s):
                self.document = yaml.safe_load(self.compose_file.read_text(encoding="utf-8"))
                command, legacy = await asyncio.to_thread(compose_command)
                rendered = render_compose_file(
                    self.document, self.service_specs, volume_sources=self.volume_sources, legacy=legacy
                )
                self._scratch = Path(tempfile.mkdtemp(prefix="ngym-compose-"))
                (self._scratch / "compose.yaml").write_text(yaml.safe_dump(rendered, sort_keys=False))
                await self._compose("up", "-d", "--no-build")
                containers = await self._containers()
                for name, service in self.document["services"].items():
                    if name not in containers:
                        raise SandboxCreateError(f"Compose service {name!r} has no container")
                    self.services[name] = await AsyncSandbox.connect(
                        {"container": containers[name], "ports": list(declared_ports(service))},
                        provider=self.provider,
                        owns_provider=False,
                    )
                await self._wait_ready()
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, TimeoutError) and not str(exc):  # asyncio.timeout's own: say what was awaited
                raise TimeoutError(
                    f"Compose collection not ready within {self.timeout_s:g}s (waiting for: {self._waiting})"
                ) from exc
            raise
        self._ready = True
        return self

    async def _compose(self, *args: str) -> str:
        """Run one Compose command on this project; its output, or an error carrying its last lines."""
        assert self._scratch is not None and self.compose_file is not None
        command, _ = await asyncio.to_thread(compose_command)
        process = await asyncio.create_subprocess_exec(
            *command,
            "--project-name",
            self.project,
            "--file",
            str(self._scratch / "compose.yaml"),
            # relative bind sources resolve next to the environment's Compose file, as `docker compose` would
            "--project-directory",
            str(self.compose_file.parent),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            output, _ = await process.communicate()
        except BaseException:  # cancelled (start's timeout): do not leave the CLI running
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise
        text = output.decode(errors="replace")
        if process.returncode:
            tail = "\n".join(text.strip().splitlines()[-_LOG_TAIL:])
            raise SandboxCreateError(f"docker compose {args[0]} failed (exit {process.returncode}):\n{tail}")
        return text

    async def _containers(self) -> dict[str, str]:
        """Service name → container id, for this project (Compose labels its containers)."""
        if not isinstance(self.provider, _DrivesDockerEngine):  # start() let only the docker provider through
            raise NotImplementedError(f"Sandbox provider {self.provider.name!r} has no Docker engine for Compose")
        found = await asyncio.to_thread(
            self.provider.engine().containers.list,
            all=True,
            filters={"label": f"com.docker.compose.project={self.project}"},
        )
        return {c.labels.get("com.docker.compose.service"): c.id for c in found}

    async def _wait_ready(self) -> None:
        """Until every service runs (healthy, when it has a healthcheck) or has finished with exit 0."""
        pending = dict(self.services)
        while pending:
            self._waiting = ", ".join(f"service {name!r}" for name in pending)
            for name, sandbox in list(pending.items()):
                assert sandbox.handle is not None
                container = sandbox.handle.raw
                await asyncio.to_thread(container.reload)
                state = container.attrs.get("State") or {}
                health = (state.get("Health") or {}).get("Status")
                if state.get("Status") == "exited":
                    if state.get("ExitCode"):
                        raise RuntimeError(
                            f"Compose service {name!r} exited ({state.get('ExitCode')}): {await self._logs(container)}"
                        )
                    del pending[name]
                elif health == "unhealthy":
                    probes = (state.get("Health") or {}).get("Log") or [{}]
                    raise RuntimeError(f"Compose service {name!r} unhealthy: {probes[-1].get('Output', '')}".strip())
                elif state.get("Status") == "running" and health in (None, "healthy"):
                    del pending[name]
            if pending:
                await asyncio.sleep(self.poll_interval_s)

    @staticmethod
    async def _logs(container: Any) -> str:
        raw = await asyncio.to_thread(container.logs, tail=_LOG_TAIL)
        return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)

    async def serialize(self, *, scope: str | None = None) -> dict[str, Any]:
        """Descriptors of the running services for :meth:`connect` in another process (which must not outlive
        this collection: the creator's ``stop()`` removes the project)."""
        if not self._ready or self._closed:
            raise RuntimeError("Serializing requires a running Compose collection")
        return {"services": {name: await sandbox.serialize(scope=scope) for name, sandbox in self.services.items()}}

    @classmethod
    async def connect(
        cls, descriptor: Mapping[str, Any], *, provider: Mapping[str, Any] | SandboxProvider
    ) -> AsyncSandboxCompose:
        """Reach the services of a collection another process started, without starting anything."""
        if not isinstance(descriptor, Mapping) or set(descriptor) != {"services"}:
            raise ValueError("Invalid Compose connection descriptor")
        services = descriptor["services"]
        if (
            not isinstance(services, Mapping)
            or not services
            or any(not isinstance(v, Mapping) for v in services.values())
        ):
            raise ValueError("Invalid Compose connection members")
        collection = cls(provider, None)
        try:
            for name, member in services.items():
                collection.services[name] = await AsyncSandbox.connect(
                    member, provider=collection.provider, owns_provider=False
                )
        except BaseException:
            if collection._owns_provider:
                await collection.provider.aclose()
            raise
        collection._started = collection._ready = True
        return collection

    async def stop(self) -> None:
        """Remove every service, the project's network and volumes; idempotent, and completes when cancelled."""
        if self._closed:
            return
        if self._stop_task is None or self._stop_task.done():
            self._stop_task = asyncio.create_task(self._stop())
        await asyncio.shield(self._stop_task)

    async def _stop(self) -> None:
        errors: list[Exception] = []
        if self._scratch is not None:
            for sandbox in self.services.values():
                await sandbox.disconnect()  # `down` removes the containers
            try:
                await self._compose("down", "--volumes", "--remove-orphans", "--timeout", str(STOP_GRACE_S))
            except Exception as error:
                errors.append(error)
            shutil.rmtree(self._scratch, ignore_errors=True)
        else:  # connected: the services are stopped through the provider, as NeMo Gym does
            for sandbox in reversed(list(self.services.values())):
                try:
                    await sandbox.stop()
                except Exception as error:
                    errors.append(error)
        if self._owns_provider:
            try:
                await self.provider.aclose()
            except Exception as error:
                errors.append(error)
        if errors:
            raise ExceptionGroup("Compose cleanup failed", errors)
        self._closed = True

    async def __aenter__(self) -> AsyncSandboxCompose:
        if self._ready and not self._closed:
            return self
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
