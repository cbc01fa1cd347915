"""One OpenEnv episode = one session of the server's session manager, driven through the environment's own routes.

Every action is the HTTP request a NeMo Gym agent would make (``/seed_session``, ``/<tool>``, ``/verify``,
``/close_session``), carrying the episode's session cookie, made in process through the whole app (middleware,
session binding, validation) by ``ngym.server.fronts.inprocess``, as the MCP and ORS fronts do. The episode keeps
the trajectory the way NeMo Gym's ``simple_agent`` builds it (``function_call`` + ``function_call_output`` items,
then the final ``message``), so ``/verify`` gets the same body and gives the same reward as over NeMo Gym's wire.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic_core

from ngym.server.fronts import gymnasium, held, outcomes
from ngym.server.fronts.inprocess import Answer, RolloutSession, encode, response_json, with_raw
from ngym.server.protocol import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

if TYPE_CHECKING:
    from ngym.server.fronts.openenv.front import OpenEnvFront
    from ngym.server.fronts.openenv.rows import ReadyRow

#: The tool an MCP-style client ends an episode with: its ``content`` is the model's final answer.
FINAL_ANSWER_TOOL = "final_answer"
#: Routes a model may never reach through a tool call (as NeMo Gym's agent refuses them).
RESERVED_ROUTES = frozenset(
    {"seed_session", "verify", "close_session", "aggregate_metrics", "health", "docs", "openapi.json", "mcp"}
)
#: Keys of the verify answer that echo the request (the whole trajectory): left out of the observation.
_ECHOED = ("responses_create_params", "response")


#: the fields of an action (OpenEnv's ``CallToolAction``/``ListToolsAction`` and ngym's final answer)
ACTION_FIELDS = frozenset({"type", "tool_name", "arguments", "message", "metadata"})


def action_errors(action: dict[str, Any]) -> list[dict[str, Any]]:
    """An action's unknown fields as pydantic errors (OpenEnv's actions forbid extra fields: its server answers
    422 ``extra_forbidden`` over HTTP, ``VALIDATION_ERROR`` over its WebSocket); empty when there is none."""
    return [
        {"type": "extra_forbidden", "loc": [key], "msg": "Extra inputs are not permitted", "input": action[key]}
        for key in action
        if key not in ACTION_FIELDS
    ]


class EpisodeError(ValueError):
    """An action this episode cannot take now (step before reset, after the end, a malformed action), or a seed
    the server refused: ``status`` is the HTTP status to answer with (the seed route's own, e.g. 503 when the
    server is at its session limit)."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Outcome:
    """What one reset or step answers, in OpenEnv's wire form (``serialize_observation``'s)."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    #: ``observation`` as JSON when it was encoded with parts kept per row (a reset's), for ``wire_json``
    encoded: bytes | None = None

    def wire(self) -> dict[str, Any]:
        return {"observation": self.observation, "reward": self.reward, "done": self.done, "metadata": self.metadata}

    def wire_json(self) -> bytes:
        """``wire()`` as JSON (``pydantic_core.to_json``'s bytes)."""
        if self.encoded is None:
            return pydantic_core.to_json(self.wire())
        rest = pydantic_core.to_json({"reward": self.reward, "done": self.done, "metadata": self.metadata})
        return b'{"observation":' + self.encoded + b"," + rest[1:]


class Episode:
    """One client's episode: its session cookie, its dataset row and the trajectory so far."""

    def __init__(self, front: OpenEnvFront, episode_id: str | None = None) -> None:
        self.front = front
        self.episode_id = episode_id or os.urandom(12).hex()
        self.lock = asyncio.Lock()
        self.session = RolloutSession(front.app, front.cookie_name)
        self.row: dict[str, Any] | None = None
        #: the row's parts encoded once (``rows.ReadyRow``), set by ``reset``
        self.ready: ReadyRow | None = None
        #: the row as the seed sent it (JSON): the verify body is it plus the trajectory
        self.seed_body: bytes | None = None
        #: the names of the row's function tools (None: it declares none, any tool route may be called)
        self.declared: frozenset[str] | None = None
        self.task_index: int | None = None
        self.resets = 0
        self.output: list[dict[str, Any]] = []
        self.held = 0  #: bytes of the calls' arguments and answers in ``output`` (``ngym.server.fronts.held``)
        self.step_count = 0
        self.done = False
        self.reward: float | None = None
        self.closed = False
        #: a Gymnasium-style environment's episode (``/reset`` + ``/step``), None on NeMo Gym's seed/verify wire
        self.gym: gymnasium.GymEpisode | None = None
        #: when a request last named this episode (``time.monotonic()``), for the front's idle reclaim
        self.last_used = time.monotonic()

    @property
    def in_progress(self) -> bool:
        """Whether this episode holds a live session: reset, not finished, not closed."""
        return self.row is not None and not self.done and not self.closed

    # ---- the actions -------------------------------------------------------------------------------------------

    async def reset(self, arguments: dict[str, Any]) -> Outcome:
        """Seed a session with a row (``RowPicker.pick``); a live one of this episode is closed by the seed."""
        ready, index = self.front.rows.pick_ready(arguments, self.front.describe_row)
        indices = (
            {ROLLOUT_INDEX_KEY: self.resets}
            if index is None
            else {TASK_INDEX_KEY: index, ROLLOUT_INDEX_KEY: self.resets}
        )
        seeded = {**ready.row, **indices}
        body = ready.seed_body(indices)
        if self.front.gymnasium:
            await self._close_session()  # a live episode of this client ends before the next one starts
            status, answer, _ = _read(await self.session.post(gymnasium.RESET, body))
        else:
            status, answer, _ = _read(await self.session.seed(body))
        route = "reset" if self.front.gymnasium else "seed_session"
        if status >= 400:
            raise EpisodeError(f"{route} answered HTTP {status}: {_short(answer)}", status)
        self.gym = gymnasium.after_reset(answer) if self.front.gymnasium else None
        self.row, self.ready, self.task_index, self.resets = seeded, ready, index, self.resets + 1
        self.declared = ready.declared
        self.seed_body = body if seeded and "response" not in seeded else None
        self.output, self.held, self.step_count, self.done, self.reward = [], 0, 0, False, None
        rest: dict[str, Any] = {"task_index": index, "episode_id": self.episode_id}
        if self.gym is not None:
            rest["observation"] = self.gym.observation
        elif isinstance(answer, dict) and answer:
            rest["seed"] = answer
        params = ready.row.get("responses_create_params") or {}
        observation = {"prompt": ready.prompt, "available_tools": self.front.tool_specs(params), **rest}
        return Outcome(observation, encoded=ready.observation_json(rest))

    async def step(self, action: dict[str, Any]) -> Outcome:
        """A tool call (``tool_name`` + ``arguments``), a final answer (``message``), or ``list_tools``."""
        errors = action_errors(action)
        if errors:
            raise EpisodeError(f"the action has fields no action takes: {[e['loc'][-1] for e in errors]}", 422)
        if action.get("type") == "list_tools":
            return Outcome({"tools": self.front.mcp_tool_list()})
        message = action.get("message")
        name = action.get("tool_name")
        if isinstance(message, str) and name is None:
            return await self.finish(message)
        if not isinstance(name, str) or not name:
            raise EpisodeError(
                'an action is {"tool_name": NAME, "arguments": {...}} (a tool call) or {"message": TEXT} '
                f"(the final answer); got keys {sorted(action)}"
            )
        arguments = action.get("arguments")
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise EpisodeError(f"arguments of {name} must be an object, got {type(arguments).__name__}")
        if name == FINAL_ANSWER_TOOL and name not in self.front.tools:
            outcome = await self.finish(_final_text(arguments))
            outcome.observation = {"tool_name": name, "result": outcome.observation["verification"], "error": None}
            return outcome
        return await self.call_tool(name, arguments)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Outcome:
        """Run the tool's route in this episode's session; the trajectory gets the call and its output."""
        self._require_running()
        if self.gym is not None:
            self.step_count += 1
            call = gymnasium.call_item(name, arguments, f"call_{self.step_count}")
            return await self._gym_step([call], {"tool_name": name})
        config = self.front.server.config
        call_text = held.arguments_text(arguments)
        size = held.size_of(call_text)
        refused = held.call_refused(self.held, size, config)
        if refused is not None:  # not run, not kept
            return Outcome(
                {"tool_name": name, "result": None, "error": {"error_type": "execution_error", "message": refused}}
            )
        self.held += size
        self.step_count += 1
        call_id = f"call_{self.step_count}"
        self.output.append(
            {
                "type": "function_call",
                "name": name,
                "arguments": call_text,
                "call_id": call_id,
                "id": f"fc_{self.step_count}",
                "status": "completed",
            }
        )
        declared = self.declared
        error: dict[str, Any] | None = None
        if name in RESERVED_ROUTES or (declared is not None and name not in declared) or not name.isidentifier():
            available = ", ".join(sorted(declared or self.front.tools)) or "none declared"
            text = json.dumps({"error": f"unknown tool {name!r}; available tools: {available}"})
            error = {"error_type": "tool_not_found", "message": f"unknown tool {name!r}; available: {available}"}
            result: Any = None
        else:
            status, result, text = _read(await self.session.call(name, arguments))
            if status >= 400:  # the model sees what the tool said, whatever the status (as NeMo Gym stores it)
                kind = "invalid_args" if status == 422 else "execution_error"
                error = {"error_type": kind, "message": f"HTTP {status}: {text[:500]}"}
        kept = held.answer_kept(self.held, text, config)
        self.held += held.size_of(kept)
        self.output.append({"type": "function_call_output", "call_id": call_id, "output": kept})
        told = outcomes.read(text) if error is None and self.front.server.tool_outcomes else None
        if told is not None:  # the tool's answer carries its outcome (an installed ORS environment's)
            return await self._told(name, told)
        return Outcome({"tool_name": name, "result": result, "error": error})

    async def _told(self, name: str, told: outcomes.Outcome) -> Outcome:
        """A call whose answer carries its outcome: its output as the result, a refusal as the error, and an output
        that ends the episode ends it here, with ``/verify``'s reward."""
        if told.refused is not None:
            kind = "invalid_args" if told.refused == "input_validation" else "execution_error"
            return Outcome({"tool_name": name, "result": None, "error": {"error_type": kind, "message": told.text}})
        if not told.finished:
            return Outcome({"tool_name": name, "result": told.text, "error": None})
        ended = await self.finish("")
        ended.observation = {"tool_name": name, "result": told.text, "error": None, **ended.observation}
        return ended

    async def finish(self, text: str) -> Outcome:
        """The final answer: verify the trajectory; the reward is verify's, ``None`` when masked or failed. (A
        Gymnasium-style environment's answer is one step, which may not end the episode.)"""
        self._require_running()
        if self.gym is not None:
            self.step_count += 1
            outcome = await self._gym_step([gymnasium.message_item(text, self.step_count)], {})
            outcome.observation["verification"] = outcome.metadata if outcome.done else None
            return outcome
        self.output.append(
            {
                "type": "message",
                "id": "msg_final",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
        assert self.row is not None
        params = self.row.get("responses_create_params") or {}
        response = {
            "id": f"resp_openenv_{self.episode_id}_{self.resets}",
            "created_at": time.time(),
            "model": "openenv-client",
            "object": "response",
            "output": self.output,
            "parallel_tool_calls": params.get("parallel_tool_calls", True),
            "tool_choice": params.get("tool_choice", "auto"),
        }
        assert self.ready is not None
        encoded = response_json(response, self.ready.tools)  # "tools" (the row's, encoded once), "status" last
        if self.seed_body is not None:
            body = with_raw(self.seed_body, "response", encoded)
        else:
            whole = {**response, "tools": params.get("tools") or [], "status": "completed"}
            body = encode({**self.row, "response": whole})
        status, answer, raw = _read(await self.session.verify(body, echo=False))
        self.done = True
        if status >= 400 or not isinstance(answer, dict):
            self.reward = None
            await self._close_session()
            return Outcome({"verification": None, "error": f"verify answered HTTP {status}: {raw[:500]}"}, None, True)
        masked = bool(answer.get("mask_sample"))
        reward = answer.get("reward")
        self.reward = None if masked or not isinstance(reward, int | float) else float(reward)
        if not self.front.server.config.close_session_after_verify:
            await self._close_session()
        else:
            self.session.forget()  # the server closed it after verify
        verification = {k: v for k, v in answer.items() if k not in _ECHOED}
        metadata = {"masked": masked, "failure_kind": answer.get("failure_kind")} if masked else {}
        return Outcome({"verification": verification}, self.reward, True, metadata)

    def state(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "step_count": self.step_count,
            "task_index": self.task_index,
            "done": self.done,
            "reward": self.reward,
        }

    async def close(self) -> None:
        """Close the session if one is live (an episode left before its end)."""
        if self.closed:
            return
        self.closed = True
        await self._close_session()

    # ---- plumbing ----------------------------------------------------------------------------------------------

    async def _gym_step(self, items: list[dict[str, Any]], observation: dict[str, Any]) -> Outcome:
        """One step of a Gymnasium-style episode; the ending step carries the episode's reward (the sum)."""
        assert self.gym is not None and self.row is not None
        body = gymnasium.step_body(self.row, self.gym, items, "openenv-client")
        status, answer, raw = _read(await self.session.post(gymnasium.STEP, body))
        result = gymnasium.read_step(self.gym, status, answer, raw, items)
        error = {"error_type": "execution_error", "message": result.text} if status >= 400 else None
        if result.done:
            self.done, self.reward = True, result.reward
            await self._close_session()
        observed = {**observation, "result": result.text, "error": error}
        return Outcome(observed, result.reward, result.done, result.metadata)

    def _require_running(self) -> None:
        if self.row is None:
            raise EpisodeError("no episode: reset first")
        if self.done:
            raise EpisodeError("the episode is over (its reward was given): reset to start another")

    async def _close_session(self) -> None:
        if self.gym is None:
            await self.session.close()
            return
        if self.gym.explicit_close and not self.gym.closed and self.session.live:
            self.gym.closed = True
            await self.session.post(gymnasium.CLOSE, {})
        self.session.forget()


def _read(answer: Answer) -> tuple[int, Any, str]:
    """An in-process answer as (status, parsed JSON or the text when it is not JSON, raw text)."""
    text = answer.text
    try:
        parsed = answer.json()
    except ValueError:
        parsed = text
    return answer.status, parsed, text


def _final_text(arguments: dict[str, Any]) -> str:
    for key in ("content", "answer", "message", "text"):
        if isinstance(arguments.get(key), str):
            return str(arguments[key])
    raise EpisodeError(f'{FINAL_ANSWER_TOOL} takes {{"content": TEXT}}, got keys {sorted(arguments)}')


def _short(answer: Any) -> str:
    return (answer if isinstance(answer, str) else json.dumps(answer))[:300]
