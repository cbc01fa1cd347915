"""The resources server of an installed verifiers environment: ngym's routes in front of its worker.

- ``POST /seed_session`` with ``{"verifiers": {"idx": N}}`` (the N-th task of the environment's own
  dataset / taskset) or ``{"verifiers": {"task": {...}}}`` (v1 task data) / ``{"verifiers": {"prompt": ...,
  "answer": ..., "info": ...}}`` (a <= 0.3 row): the worker seeds the rollout's state with the environment's
  own code.
- ``POST /<tool>`` for each tool, its body the tool's arguments (the JSON schema is on ``/docs``): the tool's
  output as text (``{"output": "..."}``), computed on that rollout's state. A 0.4 tool's arguments are validated
  as verifiers' own MCP tool server validates them (``"3"`` is 3 for an ``int``, ``3.7`` is an error); an error
  result answers 200 with the text verifiers shows the model and ``"is_error": true``.
- ``POST /verify``: the Responses output turned into verifiers' messages, scored by the environment's own
  reward functions; ``reward`` is their weighted sum, ``reward_components`` each function's score and
  ``reward_weights`` its weight. A reward function that fails, or a worker that died, is a masked sample
  (``mask_sample``, ``failure_kind: verifier_error``) with the reason, never a silent 0.0.

The worker is one process per server (it holds every rollout's state), so the server needs session affinity
and its state is not serialisable.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any, ClassVar

from fastapi import HTTPException, Request
from pydantic import Field

from ngym import (
    BaseMultiRewardVerifyResponse,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    NgymError,
)
from ngym.plugin_api import InstalledServer, failure_kinds
from ngym_verifiers import venvs
from ngym_verifiers.messages import chat_messages
from ngym_verifiers.process import Worker, WorkerError, WorkerGone
from ngym_verifiers.records import Record

log = logging.getLogger(__name__)


class VerifiersSeed(BaseSeedSessionRequest):
    verifiers: dict[str, Any] = Field(
        default_factory=lambda: {"idx": 0},
        description="Which task: {'idx': N} (the environment's own N-th task) or the task's data.",
    )


class VerifiersVerifyRequest(BaseVerifyRequest):
    verifiers: dict[str, Any] = Field(default_factory=dict)


class VerifiersVerifyResponse(BaseMultiRewardVerifyResponse):
    verifiers: dict[str, Any] = Field(default_factory=dict)
    reward_weights: dict[str, float] = Field(default_factory=dict)


class VerifiersSeedResponse(BaseSeedSessionResponse):
    prompt: list[dict[str, Any]] = Field(default_factory=list, description="The task's prompt messages.")


class VerifiersServer(InstalledServer):
    """Serves one installed verifiers environment (``record``) through its worker (one process per server, holding
    every rollout's state: session affinity). Rewards are the rubric's weighted sum, unclipped (weights above 1 in
    all, or negative, are allowed)."""

    record: ClassVar[Record]
    image_payload = "ngym_verifiers.image:container_payload"
    _worker: Worker | None = None

    async def call_tool(self, request: Request, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.session_state(request)  # 409 with the explanation when the rollout was not seeded
        answer = await self._ask("tool", session=self.session_id(request), name=name, arguments=arguments)
        # an error result (bad arguments, the tool raised) is shown to the model as verifiers shows it: its text
        return {"output": answer["output"], **({"is_error": True} if answer.get("is_error") else {})}

    async def on_startup(self) -> None:
        installed_as_recorded(self.record)
        self._worker = await Worker.start(
            self.record.python, self.record.module, self.record.args, self.record.datasets
        )

    async def on_shutdown(self) -> None:
        if self._worker is not None:
            await self._worker.stop()
            self._worker = None

    async def _ask(self, op: str, **fields: Any) -> dict[str, Any]:
        """The worker's answer; its refusals and bad requests are 4xx, its failures 502, a dead worker 503."""
        if self._worker is None:
            raise HTTPException(503, "the verifiers worker is not running (the server is starting or stopping)")
        try:
            return await self._worker.ask(op, **fields)
        except WorkerGone as exc:
            raise HTTPException(503, f"{exc}: this rollout's state is lost") from exc
        except WorkerError as exc:
            if exc.kind in ("refused", "bad_request"):
                raise HTTPException(422, str(exc)) from exc
            log.warning("verifiers environment %s failed in %s: %s\n%s", self.record.name, op, exc, exc.trace or "")
            raise HTTPException(502, f"the environment failed: {exc}") from exc

    # ngym reads the row model from the annotation (as every built-in does), hence the narrower parameter types
    async def seed_session(self, request: Request, body: VerifiersSeed) -> VerifiersSeedResponse:
        answer = await self._ask("seed", session=self.session_id(request), row=body.verifiers)
        self.set_session_state(request, {"seeded": True})  # the state itself lives in the worker
        return VerifiersSeedResponse(prompt=answer.get("prompt") or [])

    async def verify(self, request: Request, body: VerifiersVerifyRequest) -> VerifiersVerifyResponse:
        echoed = body.model_dump()
        if self.session_state(request, required=False) is None:
            reason = "no seeded session: the rollout's verifiers state is gone (seed, then verify)"
            return self.masked(
                VerifiersVerifyResponse, echoed, failure_kinds.VERIFIER_ERROR, reason, reward_components={}
            )
        output = [item.model_dump(mode="json") for item in body.response.output]
        try:
            assert self._worker is not None
            answer = await self._worker.ask("verify", session=self.session_id(request), messages=chat_messages(output))
        except (WorkerError, AssertionError) as exc:
            # The environment's reward code could not score this rollout: a masked sample, loud, never 0.0.
            reason = f"verifiers could not score the rollout: {exc}"
            return self.masked(
                VerifiersVerifyResponse, echoed, failure_kinds.VERIFIER_ERROR, reason, reward_components={}
            )
        rewards = answer.get("rewards") or {}
        return VerifiersVerifyResponse(
            **echoed,
            reward=float(answer["reward"]),
            reward_components={name: float(r["score"]) for name, r in rewards.items()},
            reward_weights={name: float(r["weight"]) for name, r in rewards.items()},
        )

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        if self._worker is not None:
            with contextlib.suppress(WorkerError):  # a dead worker holds nothing any more
                await self._worker.ask("close", session=session_id)


class ReplacedError(NgymError):
    """The venv now holds other code under the environment's name than what was installed and recorded."""

    exit_code = 2


def installed_as_recorded(record: Record) -> None:
    """Refuse to serve when the environment's code in its venv is no longer what ``ngym install`` recorded.

    venvs are shared by requirement set, so installing another folder or module of the same name into the same
    venv replaces this one's code: serving it would score with reward functions other than the recorded ones."""
    if not record.fingerprint:
        return  # recorded before fingerprints were kept
    module = record.module if record.distribution is None else None
    now = venvs.fingerprint(record.python, distribution=record.distribution, module=module)
    if now != record.fingerprint:
        what = "is no longer installed" if not now else "was replaced by another install of that name"
        raise ReplacedError(
            f"{record.name}: its code in {Path(record.python).parent.parent} {what} since it was installed from"
            f" {record.source}: install it again (ngym install {record.source})"
        )
