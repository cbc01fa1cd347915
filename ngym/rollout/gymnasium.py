"""Gymnasium-style resources servers: NeMo Gym 0.7.0's ``/reset`` + ``/step`` protocol, driven as its
``gymnasium_agent`` drives it.

Such a server (NeMo's ``resources_servers.gymnasium.GymnasiumServer``: blackjack, wordle, grl_sokoban, …) has
no ``/seed_session`` and no ``/verify``. One episode on the wire:

1. ``POST /reset`` with the dataset row → ``{observation, info}``; its ``Set-Cookie`` is the episode's session.
   A non-empty ``observation`` is appended to the model's input as a user message.
2. Per model turn: ``POST /step`` with the row plus ``response`` (that turn's Responses object, its output
   only that turn's items; plus ``_ng_step_request_id``, a fresh hex id, when reset's ``info`` says
   ``supports_step_idempotency``) → ``{observation, reward, terminated, truncated, info}``. Cookies the step
   sets are merged in. The episode's reward is the **sum** of the steps' rewards, on whatever scale the
   environment uses (not [0, 1]). It ends when a step says ``terminated`` or ``truncated`` (the server then
   frees the session itself); otherwise ``info.tool_outputs`` (``[{call_id, output}]``) become
   ``function_call_output`` items and the observation a user message, and the model is asked again. Running out
   of model turns (``max_steps``, or the end of a recording) marks the episode truncated.
3. ``POST /close`` with ``{}``, only when reset's ``info.supports_explicit_close`` is true — after the episode,
   and also when it failed part-way (the server holds a slot until then).

The episode is written once, as a generator that yields what it needs (an ``EnvRequest`` for the server, a
``ModelRequest`` for the next model turn) and receives the answers, so the same code serves ``ngym profile``
(gevent), ``containerize --run`` (sync httpx), ``ngym validate`` (in-process) and ``ngym rollout`` (asyncio, a
real model): each only pumps it with its own transport (``drive``, ``drive_async``). A failed request is
thrown into the generator, which closes the episode when it must and re-raises.

Why in ngym, not in the NeMo compat plugin (``ngym-nemo-gym``, which provides the ``nemo_gym`` import surface):
this is a wire protocol, and ngym promises NeMo Gym 0.7.0's wire. A server speaks it whoever built it and
wherever it runs (in an image, at a URL no plugin knows the name of), so the tools tell the protocols apart
by the server's own routes (``GET /openapi.json``: ``/reset`` + ``/step``, no ``/seed_session``), not by a
name or a plugin; and four tools need it, where a plugin hook would be one hook per tool for one protocol.

Replaying a recorded rollout: its ``response.output`` holds the model's turns with the environment's items
(``function_call_output``, user messages) between them; ``split_turns`` recovers the turns, ``Recording``
answers each ``ModelRequest`` with the next one.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

RESET = "/reset"
STEP = "/step"
CLOSE = "/close"

#: Output item types a server adds to the trajectory (the rest are the model's).
_ENV_ITEM_TYPES = {"function_call_output"}
#: Message roles that are not the model's: observations come back as user messages.
_ENV_ROLES = {"user", "system", "developer"}


def is_gymnasium_style(post_routes: Iterable[str]) -> bool:
    """Does a server with these POST routes speak ``/reset`` + ``/step`` instead of seed/verify?"""
    routes = set(post_routes)
    return RESET in routes and STEP in routes and "/seed_session" not in routes


def post_routes_of(openapi: Any) -> set[str]:
    """The POST paths of an OpenAPI document (``GET /openapi.json``)."""
    paths = openapi.get("paths") if isinstance(openapi, dict) else None
    if not isinstance(paths, dict):
        return set()
    return {path for path, operations in paths.items() if isinstance(operations, dict) and "post" in operations}


def server_post_routes(base_url: str, timeout: float = 10.0) -> set[str] | None:
    """The POST routes a running server documents (``GET /openapi.json``); None when it documents none."""
    try:
        answer = httpx.get(f"{base_url.rstrip('/')}/openapi.json", timeout=timeout)
        return post_routes_of(answer.json()) if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def is_env_item(item: Any) -> bool:
    """An output item the environment put in the trajectory (a tool's output, an observation message)."""
    if not isinstance(item, dict):
        return False
    if item.get("type") in _ENV_ITEM_TYPES:
        return True
    return item.get("type", "message") == "message" and item.get("role") in _ENV_ROLES


def split_turns(output: Iterable[Any]) -> list[list[dict[str, Any]]]:
    """The model's turns in a recorded trajectory: each maximal run of model items between environment items.

    Two turns with nothing from the environment between them (a step answering no observation and no tool
    output, not ending the episode) cannot be told apart in a recording and come out as one.
    """
    turns: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        if is_env_item(item):
            if current:
                turns.append(current)
                current = []
            continue
        current.append(item)
    if current:
        turns.append(current)
    return turns


@dataclass(frozen=True)
class EnvRequest:
    """POST ``body`` to the environment's ``path``; the answer sent back is the decoded JSON body."""

    path: str
    body: dict[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    """Ask the model for its next turn given ``input`` (the row's input, then the trajectory so far); the
    answer sent back is a Responses object (dict), or None when the model has no more turns (a recording ended)."""

    params: dict[str, Any]
    input: list[dict[str, Any]]


@dataclass
class EpisodeResult:
    """What ``gymnasium_agent`` returns for one episode."""

    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    response: dict[str, Any]  #: the last model response, its output the whole trajectory
    steps: int = 0
    closed: bool = False
    routes: list[str] = field(default_factory=list)  #: the requests made, in order ("reset", "step", …)

    def as_verify_response(self, row: dict[str, Any]) -> dict[str, Any]:
        """The episode as NeMo's ``GymnasiumRunResponse`` shape: the row, ``response``, ``reward``, end flags."""
        return {
            **row,
            "response": self.response,
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "info": self.info,
        }


Episode = Generator[EnvRequest | ModelRequest, Any, EpisodeResult]


def _as_items(value: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": value, "type": "message"}] if isinstance(value, str) else list(value or [])


def _user_message(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "type": "message"}


def episode(row: dict[str, Any], *, max_steps: int | None = None) -> Episode:
    """One episode of ``row`` (a dataset row): reset → (model turn → step)… → close when advertised."""
    reset = yield EnvRequest(RESET, row)
    info = _info(reset) if isinstance(reset, dict) else {}
    explicit_close = info.get("supports_explicit_close") is True
    try:
        result = yield from _open_episode(row, reset, info.get("supports_step_idempotency") is True, max_steps)
    except GeneratorExit:
        raise
    except BaseException:
        if explicit_close:
            with contextlib.suppress(Exception):  # free the server's slot, then report the first failure
                yield EnvRequest(CLOSE, {})
        raise
    if explicit_close:
        try:
            yield EnvRequest(CLOSE, {})
            result.closed = True
        except Exception as exc:  # the episode finished: keep its reward, say the clean-up failed
            result.info = {**result.info, "cleanup_warning": {"operation": "close", "message": str(exc)}}
    return result


def _info(answer: dict[str, Any]) -> dict[str, Any]:
    info = answer.get("info")
    return info if isinstance(info, dict) else {}


def _open_episode(row: dict[str, Any], reset: Any, idempotent: bool, max_steps: int | None) -> Episode:
    params = dict(row.get("responses_create_params") or {})
    base_input = _as_items(params.get("input"))
    observation = reset.get("observation") if isinstance(reset, dict) else None
    if observation:
        base_input.append(_user_message(observation))
    new_outputs: list[dict[str, Any]] = []
    total = 0.0
    steps = 0
    last_step: dict[str, Any] = {}
    last_response: dict[str, Any] = {}
    finished = False
    while max_steps is None or steps < max_steps:
        response = yield ModelRequest(params, base_input + new_outputs)
        if response is None:
            break
        last_response = response
        new_outputs.extend(item for item in response.get("output") or [] if isinstance(item, dict))
        body = {**row, "response": response}
        if idempotent:
            body["_ng_step_request_id"] = uuid.uuid4().hex
        answer = yield EnvRequest(STEP, body)
        last_step = answer if isinstance(answer, dict) else {}
        steps += 1
        total += float(last_step.get("reward") or 0.0)
        if last_step.get("terminated") or last_step.get("truncated"):
            finished = True
            break
        for tool_output in _info(last_step).get("tool_outputs") or []:
            new_outputs.append(
                {"type": "function_call_output", "call_id": tool_output["call_id"], "output": tool_output["output"]}
            )
        if last_step.get("observation"):
            new_outputs.append(_user_message(last_step["observation"]))
    return EpisodeResult(
        reward=total,
        terminated=bool(last_step.get("terminated")),
        truncated=bool(last_step.get("truncated")) or not finished,
        info=dict(_info(last_step)),
        response={**last_response, "output": new_outputs},
        steps=steps,
    )


class Recording:
    """Answers an episode's ``ModelRequest``s with a recorded rollout's turns, in order, then None."""

    def __init__(self, response: dict[str, Any] | None, empty: dict[str, Any]) -> None:
        template = response if isinstance(response, dict) else empty
        turns = split_turns(template.get("output") or [])
        # A row without a recorded trajectory still steps once (an empty turn), as seed → verify does.
        self.responses = [{**template, "output": turn} for turn in turns] or [{**empty, "output": []}]
        self.given = 0

    def __call__(self, request: ModelRequest) -> dict[str, Any] | None:
        if self.given >= len(self.responses):
            return None
        self.given += 1
        return self.responses[self.given - 1]


class _Pump:
    """Feeds an episode its answers (or the failure of its request) until it returns; records the routes."""

    def __init__(self, run: Episode) -> None:
        self.run = run
        self.routes: list[str] = []
        self.result: EpisodeResult | None = None
        self.request: EnvRequest | ModelRequest = self._noted(next(run))

    def _noted(self, request: EnvRequest | ModelRequest) -> EnvRequest | ModelRequest:
        if isinstance(request, EnvRequest):
            self.routes.append(request.path.lstrip("/"))
        return request

    def feed(self, answer: Any = None, error: Exception | None = None) -> None:
        try:
            # a failure is thrown in: the episode closes itself if it must, then re-raises
            self.request = self._noted(self.run.throw(error) if error is not None else self.run.send(answer))
        except StopIteration as stop:
            self.result = stop.value
            self.result.routes = self.routes


def drive(
    run: Episode,
    env: Callable[[str, dict[str, Any]], Any],
    model: Callable[[ModelRequest], dict[str, Any] | None],
) -> EpisodeResult:
    """Run an episode with blocking calls: ``env(path, body)`` → JSON body (raises on failure), ``model``."""
    pump = _Pump(run)
    while pump.result is None:
        request = pump.request
        try:
            answer = env(request.path, request.body) if isinstance(request, EnvRequest) else model(request)
        except Exception as exc:
            pump.feed(error=exc)
            continue
        pump.feed(answer)
    return pump.result


async def drive_async(
    run: Episode,
    env: Callable[[str, dict[str, Any]], Awaitable[Any]],
    model: Callable[[ModelRequest], Awaitable[dict[str, Any] | None]],
) -> EpisodeResult:
    """``drive`` with awaitable calls (asyncio)."""
    pump = _Pump(run)
    while pump.result is None:
        request = pump.request
        try:
            answer = await (env(request.path, request.body) if isinstance(request, EnvRequest) else model(request))
        except Exception as exc:
            pump.feed(error=exc)
            continue
        pump.feed(answer)
    return pump.result


def describe_routes(routes: list[str]) -> str:
    """``reset → step ×3 → close``: an episode's requests, short."""
    parts: list[str] = []
    for route in routes:
        if parts and parts[-1].split(" ×")[0] == route:
            count = int(parts[-1].split(" ×")[1]) + 1 if " ×" in parts[-1] else 2
            parts[-1] = f"{route} ×{count}"
        else:
            parts.append(route)
    return " → ".join(parts)
