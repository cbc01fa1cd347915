"""The environment's ``openreward.environments.Server``, started in its own venv on a private unix socket, and the
few calls the ngym server makes to it (``/create``, ``/{env}/prompt``, ``/{env}/call``, ``/delete``).

The socket is in a new folder only this user can enter (mode 0700): the reference server has no authentication,
so nothing but the ngym server in front of it reaches it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ngym import NgymError
from ngym_ors.records import Record

INNER = Path(__file__).with_name("inner.py")
START_SECONDS = 120.0
#: an install's first start also reads every task's prompt (the environment's setup() for each)
DESCRIBE_SECONDS = 900.0
DESCRIBED = "described.json"
#: a tool call may run long (a sandbox, a judge); the ngym server's own request timeouts bound it
CALL_TIMEOUT = httpx.Timeout(3600.0, connect=10.0)


class _QuietInnerRequests(logging.Filter):
    """httpx logs each request at info level (which ``ngym run`` shows): not the ones to the inner server."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{BASE_URL}/" not in record.getMessage()


BASE_URL = "http://ors"
logging.getLogger("httpx").addFilter(_QuietInnerRequests())


class InnerError(NgymError):
    """The inner server answered an error (``status``: its HTTP status, 0 when it could not be reached)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ToolResult:
    """One ORS tool call's outcome: ``ok`` with the output's text, reward and finished flag, or the error's text
    (``reason``: ORS's ``not_found`` / ``input_validation`` / ``episode_finished``, or ``raised``)."""

    ok: bool
    text: str
    reward: float | None = None
    finished: bool = False
    reason: str | None = None


def blocks_text(blocks: Any) -> str:
    if not isinstance(blocks, list):
        return ""
    return "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type", "text") == "text")


def parse_sse(body: str) -> tuple[str | None, str | None]:
    """The result (the ``chunk`` and ``end`` events' data joined) or the ``error`` event's text of a stream."""
    result: list[str] = []
    for event in body.replace("\r\n", "\n").split("\n\n"):
        kind, data = "message", []
        for line in event.split("\n"):
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if kind == "error":
            return None, "\n".join(data)
        if kind in ("chunk", "end"):
            result.append("\n".join(data))
    return "".join(result), None


class InnerServer:
    """A running reference server: ``await InnerServer.start(record)``, then the calls, then ``stop()``."""

    def __init__(self, label: str, env_name: str, proc: asyncio.subprocess.Process, folder: Path) -> None:
        self.label = label
        self.env_name = env_name  # the ORS name its routes are under (``Environment.name().lower()``)
        self.proc = proc
        self.folder = folder
        self.http = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(folder / "ors.sock")), base_url=BASE_URL, timeout=CALL_TIMEOUT
        )

    @classmethod
    async def start(cls, record: Record) -> InnerServer:
        """The server of an installed environment."""
        return await cls.launch(record.python, record.spec(), record.name, record.env_name)

    @classmethod
    async def launch(
        cls, python: str, spec: dict[str, Any], label: str, env_name: str = "", *, describe: bool = False
    ) -> InnerServer:
        """Start ``inner.py serve`` in ``python`` and wait until it answers. With ``describe``, it first writes what
        the environment is (``described()``; ``ngym install`` reads it) in the same process: one start, not two."""
        if not Path(python).exists():
            raise InnerError(f"{label}: its interpreter {python} is missing; install it again")
        folder = Path(tempfile.mkdtemp(prefix="ngym-ors-"))
        os.chmod(folder, 0o700)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1"}
        env.pop("PYTHONPATH", None)  # ngym's own path must not leak into the environment's interpreter
        # openreward logs every request at info level: warnings and errors (a tool that raised) unless asked
        env.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")
        described = [str(folder / DESCRIBED)] if describe else []
        proc = await asyncio.create_subprocess_exec(
            python, str(INNER), "serve", json.dumps(spec), str(folder / "ors.sock"), *described, env=env
        )
        server = cls(label, env_name, proc, folder)
        loop = asyncio.get_running_loop()
        wait = DESCRIBE_SECONDS if describe else START_SECONDS
        deadline = loop.time() + wait
        while True:
            if proc.returncode is not None:
                said = server.described() if describe and (folder / DESCRIBED).is_file() else {}
                await server.stop()
                if said.get("error"):
                    raise InnerError(f"the environment could not be loaded: {said['error']}")
                raise InnerError(f"{label}: its ORS server exited (code {proc.returncode}); its stderr says why")
            try:
                if (await server.http.get("/health", timeout=2.0)).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            if loop.time() > deadline:
                await server.stop()
                raise InnerError(f"{label}: its ORS server did not answer within {wait:g} s")
            await asyncio.sleep(0.1)

    def described(self) -> dict[str, Any]:
        """What the environment is (written by ``inner.py`` when launched with ``describe``)."""
        answer: dict[str, Any] = json.loads((self.folder / DESCRIBED).read_text(encoding="utf-8"))
        return answer

    async def _post(self, path: str, sid: str, body: dict[str, Any]) -> httpx.Response:
        if self.proc.returncode is not None:
            raise InnerError(f"the environment's ORS server exited (code {self.proc.returncode})")
        try:
            return await self.http.post(path, json=body, headers={"X-Session-ID": sid})
        except httpx.HTTPError as exc:
            raise InnerError(f"the environment's ORS server could not be reached: {exc}") from exc

    async def create(self, sid: str, task: dict[str, Any]) -> str:
        """Open the ORS session ``sid`` on ``task`` (``split``/``index`` or ``task_spec``); its prompt's text."""
        answer = await self._post("/create", sid, {"env_name": self.env_name, **task})
        if answer.status_code != 200:
            raise InnerError(_detail(answer), answer.status_code)
        try:
            prompt = await self.http.get(f"/{self.env_name}/prompt", headers={"X-Session-ID": sid})
        except httpx.HTTPError as exc:
            raise InnerError(f"the environment's ORS server could not be reached: {exc}") from exc
        if prompt.status_code != 200:  # setup() failed: openreward answers with its error
            raise InnerError(_detail(prompt), prompt.status_code)
        return blocks_text(prompt.json())

    async def call(self, sid: str, name: str, arguments: dict[str, Any]) -> ToolResult:
        answer = await self._post(f"/{self.env_name}/call", sid, {"name": name, "input": arguments})
        if answer.status_code != 200:
            raise InnerError(_detail(answer), answer.status_code)
        result, error = parse_sse(answer.text)
        if error is not None:  # the tool raised: openreward's server sends the exception's text
            return ToolResult(False, error, reason="raised")
        run = json.loads(result or "{}")
        if not run.get("ok"):
            return ToolResult(False, str(run.get("error", "")), reason=run.get("reason"))
        output = run.get("output") or {}
        reward = output.get("reward")
        return ToolResult(True, blocks_text(output.get("blocks")), reward, bool(output.get("finished")))

    async def delete(self, sid: str) -> None:
        await self._post("/delete", sid, {})

    async def stop(self) -> None:
        await self.http.aclose()
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def _detail(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:2000]
    return str(body.get("detail", body) if isinstance(body, dict) else body)[:2000]
