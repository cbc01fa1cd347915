"""The ``local`` provider: commands run on this host in a workspace folder. No isolation at all: for trusted
code and tests only; untrusted code belongs in the ``docker`` provider."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import uuid
from pathlib import Path

from nemo_gym.sandbox.providers.base import SandboxExecResult, SandboxHandle, SandboxSpec, SandboxStatus
from ngym.plugin_api import SESSION_SECRET_ENV, SESSION_SECRET_FILE_ENV

log = logging.getLogger(__name__)

#: What a command never inherits from the server: the key that signs every session's cookie, or the path of the
#: file holding it (with it, a command could forge another rollout's session).
WITHHELD_ENV = frozenset({SESSION_SECRET_ENV, SESSION_SECRET_FILE_ENV})
#: The return code of a command the runtime could not finish (timeout): no process exit code exists.
SANDBOX_RUNTIME_RETURN_CODE = 125


def command_environment() -> dict[str, str]:
    """The server's environment less what a command must not see (``WITHHELD_ENV``)."""
    return {k: v for k, v in os.environ.items() if k not in WITHHELD_ENV}


class LocalProvider:
    name = "local"

    def __init__(self, workspace_root: str | None = None, shell: str = "/bin/bash", default_timeout_s: float = 180.0):
        self._root = Path(workspace_root).expanduser() if workspace_root else Path(tempfile.gettempdir())
        self._shell = shell
        self._default_timeout_s = default_timeout_s

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        if spec.image or spec.ports:
            log.warning("the local sandbox provider ignores image, ports and resource limits: commands run on the host")
        sandbox_id = f"local-{uuid.uuid4().hex[:12]}"
        # A workdir the caller names is theirs to keep; one made here is removed at close.
        workspace, owned = (Path(spec.workdir), False) if spec.workdir else (self._root / sandbox_id, True)
        workspace.mkdir(parents=True, exist_ok=True)
        return SandboxHandle(sandbox_id, self.name, {"workspace": workspace, "env": dict(spec.env), "owned": owned})

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
        process = await asyncio.create_subprocess_exec(
            self._shell,
            "-c",
            command,
            cwd=cwd or handle.raw["workspace"],
            env={**command_environment(), **handle.raw["env"], **(env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills the command's children too
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            message = f"local command timed out after {timeout:g}s"
            return SandboxExecResult(None, message, SANDBOX_RUNTIME_RETURN_CODE, "timeout")
        return SandboxExecResult(
            stdout.decode(errors="replace"), stderr.decode(errors="replace"), process.returncode or 0
        )

    def _path(self, handle: SandboxHandle, path: str) -> Path:
        candidate = Path(path)
        return candidate if candidate.is_absolute() else handle.raw["workspace"] / candidate

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None:
        target = self._path(handle, target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_path, target)

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None:
        target_path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self._path(handle, source_path), target_path)

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        return SandboxStatus.RUNNING if handle.raw["workspace"].exists() else SandboxStatus.STOPPED

    async def close(self, handle: SandboxHandle) -> None:
        if handle.raw["owned"]:
            shutil.rmtree(handle.raw["workspace"], ignore_errors=True)

    async def aclose(self) -> None:
        return None
