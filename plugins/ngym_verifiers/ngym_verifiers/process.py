"""The worker process seen from ngym: start it in the environment's interpreter, ask, get answers.

One worker per served environment. Requests are answered in order, one at a time (a lock), which keeps the
environment's own code single-threaded as verifiers runs it; the pipe costs well under a millisecond
against tool and reward code that takes far longer.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import IO, Any

from ngym import NgymError
from ngym_verifiers import venvs

WORKER = Path(__file__).with_name("worker.py")
#: a worker answer larger than this is refused rather than buffered without bound.
LINE_LIMIT = 64 * 1024 * 1024


class WorkerError(NgymError):
    """The worker answered with an error: ``kind`` is ``refused``, ``bad_request`` or ``failed``."""

    def __init__(self, kind: str, message: str, trace: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.trace = trace


class WorkerGone(WorkerError):
    """The worker process exited (or never started): nothing it held is left."""

    def __init__(self, message: str) -> None:
        super().__init__("failed", message)


def worker_command(python: str, module: str, args: dict[str, Any] | None = None) -> list[str]:
    """The command line of a worker serving ``module`` with ``python`` (the environment's interpreter)."""
    return [python, str(WORKER), module, json.dumps(args or {})]


class Worker:
    """A running worker: ``await Worker.start(...)``, then ``await worker.ask(op, ...)``."""

    def __init__(self, proc: asyncio.subprocess.Process, api: str, hold: IO[str] | None = None) -> None:
        self.proc = proc
        self.api = api
        self._lock = asyncio.Lock()
        self._hold = hold  # the venv's use lock: the cache's pruning leaves a venv alone while a worker runs in it

    @classmethod
    async def start(
        cls, python: str, module: str, args: dict[str, Any] | None = None, datasets: dict[str, str] | None = None
    ) -> Worker:
        """Start the worker and read its greeting (the API it found), or raise what it said went wrong.

        ``datasets``: {name: local JSON-lines file} read instead of the Hugging Face Hub's dataset of that name."""
        if not Path(python).exists():
            raise WorkerGone(f"the environment's interpreter {python} is missing (reinstall the environment)")
        hold = venvs.hold_for_use(python)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1"}
        env.pop("PYTHONPATH", None)  # ngym's own path must not leak into the environment's interpreter
        env["NGYM_VERIFIERS_DATASETS"] = json.dumps(datasets or {})
        proc = await asyncio.create_subprocess_exec(
            *worker_command(python, module, args),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,  # the environment's logs and prints: ngym's stderr
            env=env,
            limit=LINE_LIMIT,
        )
        worker = cls(proc, "", hold)
        try:
            hello = await _read(proc)
        except BaseException:
            await worker.stop()
            raise
        if not hello.get("ok"):
            await worker.stop()
            raise WorkerError(str(hello.get("kind", "failed")), str(hello.get("error")), hello.get("trace"))
        worker.api = str(hello.get("api"))
        return worker

    async def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return the answer's fields; a worker error is raised as ``WorkerError``."""
        async with self._lock:
            if self.proc.returncode is not None or self.proc.stdin is None:
                raise WorkerGone(f"the verifiers worker exited (code {self.proc.returncode})")
            line = json.dumps({"op": op, **fields}) + "\n"
            try:
                self.proc.stdin.write(line.encode())
                await self.proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise WorkerGone(f"the verifiers worker exited ({exc})") from exc
            answer = await _read(self.proc)
        if not answer.pop("ok", False):
            raise WorkerError(str(answer.get("kind", "failed")), str(answer.get("error")), answer.get("trace"))
        return answer

    async def stop(self) -> None:
        await _stop(self.proc)
        if self._hold is not None:
            self._hold.close()
            self._hold = None


async def _read(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    raw = await proc.stdout.readline()
    if not raw:
        code = await proc.wait()
        raise WorkerGone(f"the verifiers worker exited (code {code}); its stderr above says why")
    answer = json.loads(raw)
    if not isinstance(answer, dict):
        raise WorkerGone("the verifiers worker answered something that is not a JSON object")
    return answer


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    if proc.stdin is not None:
        proc.stdin.close()  # the worker's loop ends at end of input
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        proc.kill()
        await proc.wait()


__all__ = ["Worker", "WorkerError", "WorkerGone", "worker_command"]
