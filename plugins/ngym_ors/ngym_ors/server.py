"""The resources server of an installed ORS environment: ngym's routes in front of ``openreward``'s own server.

The environment runs in ``openreward.environments.Server`` (the SDK's reference server), started in the
environment's venv on a private unix socket (``inner_server``); each ngym session is one ORS session on it.

- ``POST /seed_session`` with ``{"ors": {"split": "train", "index": N}}`` (the N-th task of a split) or
  ``{"ors": {"task_spec": {...}}}``: opens an ORS session on that task (the environment is made, ``setup()`` runs)
  and answers with the task's prompt.
- ``POST /<tool>`` for each ORS tool (its body the tool's input; the JSON Schema is ORS's, on ``/docs``):
  ``{"output": text, "reward": r, "finished": f}``. An ORS error result (bad input, unknown tool, a call after the
  episode finished) or a tool that raised answers 200 with the environment's message and ``"is_error": true``;
  the server stays up. A tool that raised ends the episode without a reward (openreward's own client ends the
  session then). If the environment's server process dies, the episodes it held are masked and it is started
  again for the next ones.
- ``POST /verify``: the episode's reward. ORS rewards arrive on tool outputs; ``reward`` is the **last non-null
  reward** of the episode (the outcome, as TRL's ``OpenRewardSpec`` reads an ORS episode), and ``ors`` holds every
  reward in call order and their sum. When the episode has not finished and the environment has a ``@terminal``
  tool, the final assistant message is passed to it first (as ORS harnesses do). An episode that did not finish,
  finished with no reward, or whose environment failed is **masked** (``mask_sample``), never 0.0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from pathlib import Path
from typing import Any, ClassVar

from fastapi import FastAPI, HTTPException, Request
from pydantic import ConfigDict, Field

from ngym import BaseSeedSessionRequest, BaseSeedSessionResponse, BaseVerifyRequest, BaseVerifyResponse
from ngym.plugin_api import InstalledServer, failure_kinds
from ngym_ors import records
from ngym_ors.inner_server import InnerError, InnerServer, ToolResult
from ngym_ors.records import Record

log = logging.getLogger(__name__)
#: how long a request that could not reach the environment's server waits for that process to exit (then restarts it)
RESTART_WAIT_SECONDS = 10.0


#: the fields of a NeMo Gym dataset row that are not an ORS task's own
ROW_KEYS = frozenset({"responses_create_params", "agent_ref"})


class OrsSeed(BaseSeedSessionRequest):
    """A row; without ``ors``, its fields other than NeMo Gym's (``responses_create_params``) are the task's
    ``task_spec`` (an ORS client's ``/create`` with ``task_spec`` through the ``/ors`` front sends just that), and a
    row with neither is the first task of the first split."""

    model_config = ConfigDict(extra="allow")

    ors: dict[str, Any] | None = Field(
        default=None,
        description="Which task: {'split': NAME, 'index': N} (the first split when left out) or {'task_spec': {...}}.",
    )

    def task(self) -> dict[str, Any]:
        if self.ors is not None:
            return dict(self.ors)
        spec = {k: v for k, v in (self.model_extra or {}).items() if k not in ROW_KEYS}
        return {"task_spec": spec} if spec else {"index": 0}


class OrsSeedResponse(BaseSeedSessionResponse):
    prompt: str = Field(default="", description="The task's prompt (its text blocks).")


class OrsVerifyResponse(BaseVerifyResponse):
    ors: dict[str, Any] = Field(default_factory=dict, description="rewards (in call order), sum, finished.")


class OrsServer(InstalledServer):
    """Serves one installed ORS environment (``record``) through openreward's own server; the episode lives in
    the inner server of this process (session affinity)."""

    record: ClassVar[Record]
    tool_schema_key = "input_schema"
    tool_outcomes = True  # the /ors front passes the environment's outputs, refusals and episode ends on
    image_payload = "ngym_ors.image:container_payload"
    _inner: InnerServer | None = None
    _restarting: asyncio.Lock

    @classmethod
    def data_folder(cls) -> Path | None:
        """The folder ``ngym install`` wrote (its ``data/``): the OpenEnv front's ``reset()`` reads its rows."""
        return records.folder_of(cls.record.name)

    def setup_webserver(self) -> FastAPI:
        extra = self.config.model_extra
        splits = records.folder_of(self.record.name) / "data" / "splits"
        if extra is not None and "ors_tasks" not in extra and splits.is_dir():
            # ngym's /ors front serves the environment's own splits (its tasks as rows, in the same order)
            files = {s["name"]: splits / f"{s['name']}.jsonl" for s in self.record.splits}
            extra["ors_tasks"] = {name: str(path) for name, path in files.items() if path.is_file()}
        return super().setup_webserver()

    async def on_startup(self) -> None:
        self._restarting = asyncio.Lock()
        self._inner = await InnerServer.start(self.record)

    async def _restart_if_gone(self, wait: float = 0.0) -> None:
        """Start the environment's server again when it exited (waiting up to ``wait`` s for a process that could
        not be reached to exit): the episodes it held are lost (their sessions answer 410, their verify is masked),
        the next ones run."""
        async with self._restarting:
            inner = self._inner
            if inner is None:
                return
            if inner.proc.returncode is None and wait:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(inner.proc.wait(), wait)
            if inner.proc.returncode is None:
                return
            log.warning(
                "%s: its ORS server exited (code %s); starting it again", self.record.name, inner.proc.returncode
            )
            await inner.stop()
            try:
                self._inner = await InnerServer.start(self.record)
            except InnerError as exc:  # the next request tries again
                log.error("%s: its ORS server could not start again: %s", self.record.name, exc)

    async def on_shutdown(self) -> None:
        if self._inner is not None:
            await self._inner.stop()
            self._inner = None

    def _server(self) -> InnerServer:
        if self._inner is None:
            raise HTTPException(503, "the environment's ORS server is not running (starting or stopping)")
        return self._inner

    async def call_tool(self, request: Request, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        state = self.session_state(request)  # 409 with the explanation when the rollout was not seeded
        result = await self._call(state, name, arguments)
        self.set_session_state(request, state)
        if not result.ok:
            return {"output": result.text, "is_error": True, "reason": result.reason}
        return {"output": result.text, "reward": result.reward, "finished": result.finished}

    async def _call(self, state: dict[str, Any], name: str, arguments: dict[str, Any]) -> ToolResult:
        try:
            result = await self._server().call(state["sid"], name, arguments)
        except InnerError as exc:
            state["failed"] = str(exc)
            if exc.status == 0:  # not reachable: if it died, the next rollouts get a new one
                await self._restart_if_gone(wait=RESTART_WAIT_SECONDS)
            if exc.status == 404:  # openreward's server no longer has the session (idle past its reaper)
                raise HTTPException(410, f"the ORS session is gone: {exc}") from exc
            raise HTTPException(503 if exc.status == 0 else 502, f"the environment failed: {exc}") from exc
        if result.ok:
            state["rewards"].append(result.reward)
            state["finished"] = state["finished"] or result.finished
        elif result.reason == "raised" and state["failed"] is None:
            # openreward's client ends the session when a tool raises: the episode has no reward
            state["failed"] = f"its tool {name!r} raised: {result.text}"
        return result

    # ngym reads the row model from the annotation (as every built-in does), hence the narrower parameter types
    async def seed_session(self, request: Request, body: OrsSeed) -> OrsSeedResponse:
        task = body.task()
        if "task_spec" in task:
            task = {"task_spec": task["task_spec"]}
        else:
            default = self.record.splits[0]["name"] if self.record.splits else "train"
            task = {"split": task.get("split", default), "index": task.get("index", 0)}
        previous = self.session_state(request, required=False)
        if isinstance(previous, dict) and self._inner is not None:  # seeded again: the earlier episode ends
            with contextlib.suppress(InnerError):
                await self._inner.delete(previous["sid"])
        sid = f"ngym-{uuid.uuid4()}"
        await self._restart_if_gone()
        try:
            prompt = await self._server().create(sid, task)
        except InnerError as exc:
            if exc.status == 0:
                await self._restart_if_gone(wait=RESTART_WAIT_SECONDS)
            if 400 <= exc.status < 500:
                raise HTTPException(422, f"the environment refused the task {task}: {exc}") from exc
            raise HTTPException(502, f"the environment failed to start the task: {exc}") from exc
        self.set_session_state(request, {"sid": sid, "rewards": [], "finished": False, "failed": None})
        return OrsSeedResponse(prompt=prompt)

    async def verify(self, request: Request, body: BaseVerifyRequest) -> OrsVerifyResponse:
        echoed = body.model_dump()
        state = self.session_state(request, required=False)
        if state is None:
            return self._masked(echoed, failure_kinds.SESSION_LOST, "no seeded session: the ORS episode is gone")
        terminal = self.record.terminal_tool
        if not state["finished"] and state["failed"] is None and terminal is not None:
            arguments = {terminal["arg"]: _final_text(body)} if terminal.get("arg") else {}
            with contextlib.suppress(HTTPException):  # a failure is recorded in state["failed"]
                await self._call(state, terminal["name"], arguments)
        rewards = [r for r in state["rewards"] if r is not None]
        details = {
            "rewards": state["rewards"],
            "sum": sum(rewards) if rewards else None,
            "finished": state["finished"],
        }
        if state["failed"] is not None:
            return self._masked(
                echoed, failure_kinds.VERIFIER_ERROR, f"the environment failed: {state['failed']}", details
            )
        if not state["finished"]:
            reason = "the ORS episode did not finish (no tool output had finished=true)"
            return self._masked(echoed, failure_kinds.VERIFIER_ERROR, reason, details)
        if not rewards:
            return self._masked(
                echoed, failure_kinds.VERIFIER_ERROR, "the ORS episode finished with no reward", details
            )
        return OrsVerifyResponse(**echoed, reward=float(rewards[-1]), ors=details)

    def _masked(
        self, echoed: dict[str, Any], kind: str, reason: str, details: dict[str, Any] | None = None
    ) -> OrsVerifyResponse:
        return self.masked(OrsVerifyResponse, echoed, kind, reason, ors=details or {})

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        if self._inner is not None and isinstance(state, dict) and "sid" in state:
            try:
                await self._inner.delete(state["sid"])
            except InnerError as exc:  # a dead inner server holds nothing any more
                log.debug("closing ORS session %s: %s", state["sid"], exc)


def _final_text(body: BaseVerifyRequest) -> str:
    """The last assistant message's text of the rollout (what an ORS harness passes to the terminal tool)."""
    text = ""
    for item in body.response.output:
        data = item.model_dump(mode="json") if hasattr(item, "model_dump") else dict(item)
        if data.get("type") == "message" and data.get("role", "assistant") == "assistant":
            text = "".join(str(part.get("text", "")) for part in data.get("content") or [] if isinstance(part, dict))
    return text
