"""One rollout, the way NeMo Gym's ``simple_agent`` runs it.

``/seed_session`` with the row → model → the tools it asks for → model … until the model answers without
tool calls (or ``max_steps`` model calls) → ``/verify`` with the row and the whole trajectory. The
environment's session cookie is copied by hand from every response onto the next request, as NeMo Gym's
agents do (no cookie jar). Tool trouble is the model's to see, never a crash: arguments that are not a JSON
object, a tool the row does not declare, or a tool answering 4xx/5xx each become a ``function_call_output``
(for an HTTP error, the raw body, whatever the status — as NeMo Gym stores it) and are listed in the
rollout's metadata.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from ngym.examples import dataset_row
from ngym.rollout.errors import RolloutError
from ngym.rollout.gymnasium import ModelRequest, drive_async, episode
from ngym.rollout.model_client import ModelClient
from ngym.server.protocol import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

log = logging.getLogger("ngym.rollout")

#: result key holding what the agent saw (steps, retries, tool errors); not sent to the environment
ROLLOUT_INFO_KEY = "rollout_info"

#: keys of a recorded rollout (``example_rollouts.jsonl``) that are not part of the dataset row

#: routes a model may never reach through a tool call, whatever the row declares
_RESERVED_ROUTES = {"seed_session", "verify", "close_session", "aggregate_metrics", "health", "docs", "openapi.json"}


class EnvSession:
    """Requests to one environment for one rollout; its session cookie is carried by hand."""

    def __init__(self, http: httpx.AsyncClient, base_url: str) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.cookies: dict[str, str] = {}

    async def post(self, path: str, body: Any) -> httpx.Response:
        headers = {"cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())} if self.cookies else {}
        response = await self.http.post(f"{self.base_url}{path}", json=body, headers=headers)
        for header in response.headers.get_list("set-cookie"):
            name, _, value = header.split(";", 1)[0].partition("=")
            self.cookies[name.strip()] = value.strip()
        return response

    async def call(self, path: str, body: Any) -> Any:
        """POST and return the JSON body; a non-2xx answer is a ``RolloutError``."""
        try:
            response = await self.post(path, body)
        except httpx.TransportError as exc:
            raise RolloutError(f"POST {path}: cannot reach the environment at {self.base_url}: {exc!r}") from exc
        if response.status_code >= 400:
            raise RolloutError(f"POST {path} → HTTP {response.status_code}: {response.text[:300]}")
        return response.json()


@dataclass
class RolloutInfo:
    """What happened during one rollout (saved with the result under ``rollout_info``)."""

    model_calls: int = 0
    tool_calls: int = 0
    model_retries: int = 0
    stop_reason: str = ""
    tool_errors: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "model_retries": self.model_retries,
            "stop_reason": self.stop_reason,
            "tool_errors": self.tool_errors,
            "seconds": round(self.seconds, 3),
        }


def _as_input_list(value: Any) -> list[Any]:
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value or [])


def _declared_tools(params: dict[str, Any]) -> set[str] | None:
    """Names of the row's function tools; None when the row declares none (then any tool may be tried)."""
    names = {t.get("name") for t in params.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"}
    return {n for n in names if n} or None


async def _run_tool(env: EnvSession, call: dict[str, Any], declared: set[str] | None, info: RolloutInfo) -> str:
    """Call one tool; return the text the model sees as its output."""
    name, call_id = str(call.get("name", "")), call.get("call_id", "")

    def error(kind: str, message: str, **extra: Any) -> str:
        info.tool_errors.append({"call_id": call_id, "name": name, "kind": kind, "message": message, **extra})
        log.info("tool call %s (%s): %s", name, kind, message)
        return json.dumps({"error": message})

    if name in _RESERVED_ROUTES or (declared is not None and name not in declared) or not name.isidentifier():
        available = ", ".join(sorted(declared or [])) or "none declared"
        return error("unknown_tool", f"unknown tool {name!r}; available tools: {available}")
    arguments = call.get("arguments") or "{}"
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        return error("bad_arguments", f"arguments of {name} are not valid JSON ({exc}): {arguments[:200]}")
    if not isinstance(parsed, dict):
        return error("bad_arguments", f"arguments of {name} must be a JSON object, got: {arguments[:200]}")
    try:
        response = await env.post(f"/{name}", parsed)
    except httpx.TimeoutException as exc:
        return error("tool_timeout", f"tool {name} timed out: {exc!r}")
    except httpx.TransportError as exc:
        raise RolloutError(f"tool {name}: cannot reach the environment at {env.base_url}: {exc!r}") from exc
    raw = response.text
    if response.status_code >= 400:
        # NeMo Gym agents store the raw body whatever the status; the model sees what the tool said.
        info.tool_errors.append(
            {
                "call_id": call_id,
                "name": name,
                "kind": "http_status",
                "status": response.status_code,
                "message": raw[:300],
            }
        )
        log.info("tool call %s → HTTP %d", name, response.status_code)
    return raw


async def run_rollout(
    env: EnvSession,
    model: ModelClient,
    row: dict[str, Any],
    *,
    task_index: int,
    rollout_index: int,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """Run one rollout of ``row``; return the result line (the verify response, the row, ``rollout_info``)."""
    started = time.monotonic()
    info = RolloutInfo()
    # A recorded rollout may serve as a row: its recorded trajectory and reward are not the row's.
    row = dataset_row(row)
    indices = {TASK_INDEX_KEY: task_index, ROLLOUT_INDEX_KEY: rollout_index}
    params: dict[str, Any] = dict(row.get("responses_create_params") or {})
    if "input" not in params:
        raise RolloutError(f"row {task_index} has no responses_create_params.input")
    base_input = _as_input_list(params["input"])
    declared = _declared_tools(params)

    await env.call("/seed_session", {**row, **indices})
    try:
        new_outputs: list[dict[str, Any]] = []
        last: dict[str, Any] = {}
        while True:
            reply = await model.create(params, base_input + new_outputs)
            info.model_calls += 1
            info.model_retries += reply.retries
            last = reply.response
            output = [item for item in last.get("output") or [] if isinstance(item, dict)]
            new_outputs.extend(output)
            if (last.get("incomplete_details") or {}).get("reason") == "max_output_tokens":
                info.stop_reason = "max_output_tokens"
                break
            calls = [item for item in output if item.get("type") == "function_call"]
            for call in calls:
                info.tool_calls += 1
                text = await _run_tool(env, call, declared, info)
                new_outputs.append({"type": "function_call_output", "call_id": call.get("call_id", ""), "output": text})
            if not calls:
                has_message = any(item.get("type") == "message" for item in output)
                info.stop_reason = "final_message" if has_message else "no_tool_calls"
                break
            if max_steps and info.model_calls >= max_steps:
                info.stop_reason = "max_steps"
                break
        trajectory = {**last, "output": new_outputs}
        verified = await env.call("/verify", {**row, **indices, "response": trajectory})
    except BaseException:
        # Free the session's state (verify closes it on the way that succeeds); best effort.
        with contextlib.suppress(Exception):
            await env.post("/close_session", {})
        raise
    info.seconds = time.monotonic() - started
    # The row as given (not the server's normalised echo), then what verify added (reward, metrics).
    return {**verified, **row, "response": trajectory, **indices, ROLLOUT_INFO_KEY: info.as_dict()}


async def run_episode(
    env: EnvSession,
    model: ModelClient,
    row: dict[str, Any],
    *,
    task_index: int,
    rollout_index: int,
    max_steps: int | None = None,
) -> dict[str, Any]:
    """One episode of a Gymnasium-style environment (``/reset`` → model → ``/step`` …), as NeMo Gym's
    ``gymnasium_agent`` runs it (``ngym.rollout.gymnasium``); the result line has the same shape as
    ``run_rollout``'s, its ``reward`` the sum of the steps' rewards, plus ``terminated``/``truncated``."""
    started = time.monotonic()
    info = RolloutInfo()
    row = dataset_row(row)
    indices = {TASK_INDEX_KEY: task_index, ROLLOUT_INDEX_KEY: rollout_index}
    if "input" not in (row.get("responses_create_params") or {}):
        raise RolloutError(f"row {task_index} has no responses_create_params.input")

    async def model_turn(request: ModelRequest) -> dict[str, Any]:
        reply = await model.create(request.params, request.input)
        info.model_calls += 1
        info.model_retries += reply.retries
        return reply.response

    result = await drive_async(episode({**row, **indices}, max_steps=max_steps), env.call, model_turn)
    info.stop_reason = "terminated" if result.terminated else "truncated"
    info.seconds = time.monotonic() - started
    return {**result.as_verify_response(row), **indices, ROLLOUT_INFO_KEY: info.as_dict()}
