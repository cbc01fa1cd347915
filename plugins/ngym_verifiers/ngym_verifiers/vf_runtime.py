"""The runtime a verifiers 0.4 task gets under ngym: commands in a subprocess, in a folder of its own per rollout.

Loaded by the worker (``worker.py``) inside the environment's own virtualenv, where verifiers is installed and ngym
is not: it imports only the standard library and verifiers. A task's ``setup(trace, runtime)``, ``finalize`` and
every ``@vf.reward`` / ``@vf.metric`` that takes a ``runtime`` get one, as verifiers' own runner gives them one
(``vf-eval ... --env.agent.runtime.type subprocess``): this is verifiers' ``SubprocessRuntime`` with

- a working folder per rollout (``runtime.info.id``), under ``NGYM_VERIFIERS_RUNTIME_DIR`` (default: a private
  temporary folder of the worker), made at seed and removed, with every process it started, when the session
  closes (or the worker exits);
- the environment's own virtualenv activated for every command (``python`` and its scripts first on ``PATH``);
- a time limit per command (``NGYM_VERIFIERS_RUNTIME_TIMEOUT``, 120 s): past it the command's whole process group
  is killed and the call fails;
- a cap on what a command may print (``NGYM_VERIFIERS_RUNTIME_OUTPUT_BYTES``, 4 MiB per stream): past it the
  command is killed and the call fails;
- file reads and writes (``runtime.read`` / ``runtime.write``) confined to the rollout's folder (and verifiers' own
  folder of prepared ``uv`` scripts, which ``runtime.run_uv_script`` writes).

A failing call fails the hook that made it: a setup that fails refuses the seed, a reward that fails masks the
rollout (no reward), never 0.0. Variables whose name holds ``API_KEY`` are not passed on (verifiers' own rule).
This is not an isolation boundary: commands run as the server's user, as the environment's own Python code does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from verifiers.v1.errors import SandboxError
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig, SubprocessRuntime
from verifiers.v1.runtimes.base import register

ROOT_ENV = "NGYM_VERIFIERS_RUNTIME_DIR"
TIMEOUT_ENV = "NGYM_VERIFIERS_RUNTIME_TIMEOUT"
OUTPUT_ENV = "NGYM_VERIFIERS_RUNTIME_OUTPUT_BYTES"
DEFAULT_TIMEOUT = 120.0
DEFAULT_OUTPUT_BYTES = 4 * 1024 * 1024

_root: Path | None = None


def root() -> Path:
    """The folder holding every rollout's working folder (made once per worker, 0700)."""
    global _root
    if _root is None:
        base = os.environ.get(ROOT_ENV)
        if base:
            Path(base).mkdir(parents=True, exist_ok=True)
        _root = Path(tempfile.mkdtemp(prefix="ngym-vf-runtime-", dir=base or None))
    return _root


def remove_root() -> None:
    """Remove the worker's folder of working folders (at the worker's exit)."""
    if _root is not None:
        shutil.rmtree(_root, ignore_errors=True)


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        return float(raw) if raw else default
    except ValueError:
        return default


class NgymRuntime(SubprocessRuntime):  # type: ignore[misc]  # verifiers lives in the environment's venv, not ngym's
    """verifiers' subprocess runtime, in a rollout's own folder, with a time limit and an output cap per command."""

    def __init__(self, name: str) -> None:
        super().__init__(SubprocessConfig(), name)
        self.timeout = _number(TIMEOUT_ENV, DEFAULT_TIMEOUT)
        self.output_bytes = int(_number(OUTPUT_ENV, DEFAULT_OUTPUT_BYTES))

    async def start(self) -> None:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.name)[:80] or "rollout"
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=root()))
        self.info.id = str(self.workdir)

    def process_env(self, env: dict[str, str]) -> dict[str, str]:
        """The environment's venv activated under the task's own variables (which may set PATH themselves)."""
        venv_bin = str(Path(sys.prefix) / "bin")
        path = os.environ.get("PATH", "")
        activated = {"VIRTUAL_ENV": sys.prefix, "PATH": f"{venv_bin}{os.pathsep}{path}" if path else venv_bin}
        return {**activated, **super().process_env(env)}

    async def run(self, argv: list[str], env: dict[str, str]) -> ProgramResult:
        full_env = {k: v for k, v in os.environ.items() if "API_KEY" not in k.upper()}
        full_env.update(self.process_env(env))
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=full_env,
                cwd=self.workdir,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: a time-out kills everything it started
            )
        except OSError as exc:
            raise SandboxError(f"run {argv[:1]}: {exc}") from exc
        assert proc.stdout is not None and proc.stderr is not None
        over: list[str] = []
        try:
            async with asyncio.timeout(self.timeout):
                stdout, stderr, _ = await asyncio.gather(
                    self._capped(proc.stdout, "stdout", over, proc),
                    self._capped(proc.stderr, "stderr", over, proc),
                    proc.wait(),
                )
        except TimeoutError:
            raise SandboxError(
                f"{_shown(argv)} did not finish within {self.timeout:g} s (killed; {TIMEOUT_ENV} sets the limit)"
            ) from None
        finally:
            _kill_group(proc)
        if over:
            raise SandboxError(
                f"{_shown(argv)} printed more than {self.output_bytes} bytes on {over[0]} (killed; {OUTPUT_ENV} sets"
                " the cap)"
            )
        return ProgramResult(
            exit_code=proc.returncode or 0,
            stdout=stdout.decode(errors="replace"),
            stderr=stderr.decode(errors="replace"),
        )

    async def _capped(
        self, stream: asyncio.StreamReader, name: str, over: list[str], proc: asyncio.subprocess.Process
    ) -> bytes:
        data = bytearray()
        while chunk := await stream.read(64 * 1024):
            data += chunk
            if len(data) > self.output_bytes:
                over.append(name)
                _kill_group(proc)
                return bytes(data[: self.output_bytes])
        return bytes(data)

    def _inside(self, path: str) -> Path:
        """``path`` (relative to the rollout's folder) when it is in that folder, or in verifiers' own folder of
        prepared scripts (``prepare_uv_script`` writes there, content-addressed, shared by the rollouts)."""
        assert self.workdir is not None, "the runtime is not started"
        target = (self.workdir / path).resolve()
        if not any(target.is_relative_to(Path(d).resolve()) for d in (self.workdir, self.scripts_dir)):
            raise SandboxError(f"{path!r} is outside the rollout's folder {self.workdir}")
        return target

    async def _read(self, path: str, max_bytes: int | None = None) -> bytes:
        data: bytes = await super()._read(str(self._inside(path)), max_bytes)
        return data

    async def write(self, path: str, data: bytes) -> None:
        await super().write(str(self._inside(path)), data)


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


def _shown(argv: list[str]) -> str:
    text = " ".join(argv)
    return repr(text if len(text) <= 80 else text[:77] + "...")


async def provision(name: str, env: dict[str, str]) -> NgymRuntime:
    """A started runtime for one rollout, with the task's ``runtime_env()`` (as verifiers' rollout sets it)."""
    runtime = NgymRuntime(name)
    register(runtime)  # verifiers' exit hook frees it if the worker is stopped before the session closes
    runtime.env = dict(env)
    await runtime.start()
    await runtime.prepare_setup()
    return runtime


__all__ = ["NgymRuntime", "provision", "remove_root", "root"]
