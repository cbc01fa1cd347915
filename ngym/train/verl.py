"""verl tools over an ngym environment: each of its tools a ``verl.tools.base_tool.BaseTool``.

Generate verl's tool config from a running environment (``ngym train verl-tools URL -o tools.yaml``) and point
``actor_rollout_ref.rollout.multi_turn.tool_config_path`` at it; every entry is an :class:`NgymTool`:

- ``create(create_kwargs={"ngym_row": ROW})`` seeds a session with the dataset row (``POST /seed_session``);
- ``execute(instance_id, parameters)`` calls the tool route in that session and returns
  ``(ToolResponse(text=<the route's body>), None, {})``: ngym tools give no step reward, so verl records none;
- ``calc_reward(instance_id, final_text=...)`` verifies the trajectory the tool saw (its calls and their answers,
  then the model's final text when given) as the Responses object NeMo Gym's agent would have sent: the same
  reward as NeMo's wire. A masked result (a lost session, a failed judge) is ``None``, never 0.0;
- ``release(instance_id)`` closes the session (``POST /close_session``).

verl 0.9's ``ToolAgentLoop`` calls ``create``/``execute``/``release`` around **each** tool call and never calls
``calc_reward``. So when ``execute`` is handed the loop's ``agent_data``, the rollout's session belongs to the
trajectory, not to the call: the first call's session is kept in ``agent_data.extra_fields["ngym_rollout"]``
and later calls (of any ngym tool) run in it; the conversation is linked as ``extra_fields["ngym_messages"]``.
verl hands a rollout's extra fields to the reward function, so :func:`compute_score` (``custom_reward_function``
``path: <this file>``, ``name: compute_score``) verifies and closes that session. verl has no "no reward" for a
sample (a score must be a number in the reward tensor): a masked verify makes :func:`compute_score` raise
:class:`MaskedReward` (``on_masked="raise"``, the default) rather than hand verl a 0.0 it would learn from;
``reward_kwargs: {on_masked: nan}`` returns NaN instead.

Only ``verl``, ``httpx`` and the standard library are imported: this runs in a verl virtualenv.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import weakref
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from ngym.train.needs import trainer_missing

try:
    from verl.tools.base_tool import BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
except ModuleNotFoundError as missing:
    raise trainer_missing(missing, "ngym.train.verl", "'verl>=0.9.1'") from None

from ngym.train.wire import (
    AsyncWire,
    Rollout,
    WireError,
    dataset_row,
    reward_of,
    sync_wire,
    visible_text,
)

log = logging.getLogger("ngym.train")

#: ``create_kwargs`` key holding the dataset row (a dict, or its JSON text: parquet keeps text as is)
ROW_KEY = "ngym_row"
#: ``agent_data.extra_fields`` keys: the trajectory's rollout (plain data) and its conversation
ROLLOUT_FIELD = "ngym_rollout"
MESSAGES_FIELD = "ngym_messages"
#: the same in a row's ``extra_info``, for rollouts in which no tool was called
URL_FIELD = "ngym_url"

_wires: dict[tuple[str, float], AsyncWire] = {}


class _Instance:
    """One created instance: its rollout, how many tools created it, its last verify answer."""

    def __init__(self, rollout: Rollout) -> None:
        self.rollout = rollout
        self.refs = 1
        self.verified: dict[str, Any] | None = None
        self.seeded = asyncio.Event()


#: (environment URL, instance id) -> instance, across the tools of this process
_instances: dict[tuple[str, str], _Instance] = {}
_trajectory_locks: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()


class MaskedReward(RuntimeError):
    """The environment gave this rollout no reward (masked: a lost session, a failed judge), and verl needs one."""


def wire_for(url: str, timeout: float = 120.0) -> AsyncWire:
    """One wire (connection pools) per environment URL, shared by every tool and instance in this process."""
    key = (url.rstrip("/"), float(timeout))
    if key not in _wires:
        _wires[key] = AsyncWire(key[0], timeout=key[1])
    return _wires[key]


def row_from(create_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset row in ``create_kwargs``: under ``ngym_row`` (a dict or JSON text), else the kwargs themselves."""
    value: Any = create_kwargs.get(ROW_KEY, create_kwargs)
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping) or not isinstance(value.get("responses_create_params"), Mapping):
        raise ValueError(
            "an ngym tool needs the dataset row in its create kwargs: tools_kwargs: {<tool>: {create_kwargs: "
            '{"ngym_row": <the row, with responses_create_params>}}} (ngym.train.verl.verl_row makes such rows)'
        )
    return dataset_row(value)


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


class NgymTool(BaseTool):  # type: ignore[misc]
    """One tool of an ngym environment (config: ``url``, optional ``timeout``); see the module's docstring."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        url = config.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"ngym tool {self.name}: config.url must be the environment's http(s) URL, got {url!r}")
        self.url = url.rstrip("/")
        self.wire = wire_for(self.url, float(config.get("timeout", 120.0)))

    def _held(self, instance_id: str) -> _Instance:
        held = _instances.get((self.url, instance_id))
        if held is None:
            raise KeyError(f"ngym tool {self.name}: no instance {instance_id!r} (create it first)")
        return held

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Seed a session with the row (``create_kwargs={"ngym_row": row}``, or the row's fields as kwargs).

        Tools of one environment created with the same ``instance_id`` share its session (one rollout calling
        several tools); a new id is a new session."""
        instance_id = instance_id or str(uuid4())
        key = (self.url, instance_id)
        held = _instances.get(key)
        if held is not None:
            held.refs += 1
            await held.seeded.wait()  # another tool of this rollout may still be seeding it
            if _instances.get(key) is not held:  # that seed raised (the row refused): so does this create
                raise WireError(f"ngym tool {self.name}: instance {instance_id!r} failed to seed")
            return instance_id, ToolResponse()
        create_kwargs = kwargs.get("create_kwargs")
        row = row_from(create_kwargs if isinstance(create_kwargs, Mapping) else kwargs)
        held = _instances[key] = _Instance(Rollout(row))
        try:
            await self.wire.seed(held.rollout)
        except WireError as exc:
            if not exc.unavailable:  # the environment refused this row: a dataset error, raised
                _instances.pop(key, None)
                raise
            # Down or full (a dead unit's 503, a session limit): the instance exists but its calls are not run and
            # its trajectory is never verified (compute_score: no reward), so a rollout whose tool could not run is
            # not scored as one that never called it.
            log.warning("ngym tool %s: %s: this rollout gets no reward", self.name, exc)
        except BaseException:
            _instances.pop(key, None)
            raise
        finally:
            held.seeded.set()
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float | None, dict[str, Any]]:
        """Run the tool route in the instance's session (or its trajectory's, under verl's agent loop)."""
        rollout = self._held(instance_id).rollout
        agent_data = kwargs.get("agent_data")
        if agent_data is None or not hasattr(agent_data, "extra_fields"):
            try:
                text = await self.wire.call(rollout, self.name, dict(parameters))
            except WireError as exc:  # the rollout is marked failed: calc_reward gives None
                return ToolResponse(text=json.dumps({"error": str(exc)})), None, {}
            return ToolResponse(text=text), None, {}
        lock = _trajectory_locks.setdefault(agent_data, asyncio.Lock())
        async with lock:
            return await self._execute_in_trajectory(instance_id, rollout, parameters, agent_data)

    async def _execute_in_trajectory(
        self, instance_id: str, rollout: Rollout, parameters: dict[str, Any], agent_data: Any
    ) -> tuple[ToolResponse, float | None, dict[str, Any]]:
        fields: dict[str, Any] = agent_data.extra_fields
        held = fields.get(ROLLOUT_FIELD)
        if held is None:
            trajectory = rollout  # the trajectory adopts this call's session: release must not close it
            self._held(instance_id).rollout = Rollout(rollout.row)
            fields[URL_FIELD] = self.url
        else:
            await self.wire.close(rollout)  # a session seeded for this call alone: the trajectory has one
            if fields.get(URL_FIELD) != self.url:
                raise WireError(
                    f"ngym tool {self.name} ({self.url}) called in a trajectory of the environment at "
                    f"{fields.get(URL_FIELD)}: one verl rollout runs on one environment"
                )
            trajectory = Rollout.from_dict(held)
        messages = getattr(agent_data, "messages", None)
        if isinstance(messages, list):
            fields[MESSAGES_FIELD] = messages  # the loop's own list: it will hold the final answer too
            _record_assistant_text(trajectory, fields, messages)
        try:
            text = await self.wire.call(trajectory, self.name, dict(parameters))
        except WireError as exc:  # not run: the trajectory, marked failed, is never verified (no reward)
            text = json.dumps({"error": str(exc)})
        fields[ROLLOUT_FIELD] = trajectory.as_dict()
        return ToolResponse(text=text), None, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float | None:
        """Verify the instance's trajectory (``final_text``: the model's last message); None when masked."""
        held = self._held(instance_id)
        final_text = kwargs.get("final_text")
        if isinstance(final_text, str) and final_text:
            held.rollout.add_message(final_text)
        held.verified = await self.wire.verify(held.rollout)
        return reward_of(held.verified)

    def verify_answer(self, instance_id: str) -> dict[str, Any] | None:
        """The last ``/verify`` answer of an instance (metrics beside the reward), None before or when missing."""
        held = _instances.get((self.url, instance_id))
        return held.verified if held is not None else None

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Close the instance's session once every tool that created it released it (unless verl's agent loop
        handed the session to the trajectory: :func:`compute_score` closes that one)."""
        key = (self.url, instance_id)
        held = _instances.get(key)
        if held is None:
            return
        held.refs -= 1
        if held.refs <= 0:
            _instances.pop(key, None)
            await self.wire.close(held.rollout)


def _record_assistant_text(trajectory: Rollout, fields: dict[str, Any], messages: list[Any]) -> None:
    """Add the text of assistant turns not yet recorded (the text a model writes beside its tool calls)."""
    assistants = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant"]
    seen = int(fields.get("ngym_assistant_turns", 0))
    for message in assistants[seen:]:
        text = visible_text(_message_text(message))
        if text:
            trajectory.add_message(text)
    fields["ngym_assistant_turns"] = len(assistants)


def final_text_of(messages: Any) -> str:
    """The model's final answer: the last message when it is an assistant's without tool calls, else ''."""
    if not isinstance(messages, list) or not messages:
        return ""
    last = messages[-1]
    if not isinstance(last, Mapping) or last.get("role") != "assistant" or last.get("tool_calls"):
        return ""
    return visible_text(_message_text(last))


def compute_score(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Mapping[str, Any] | None = None,
    on_masked: str = "raise",
    **kwargs: Any,
) -> dict[str, Any]:
    """verl's reward function for rollouts of :class:`NgymTool`: ``/verify`` the trajectory, close its session.

    ``extra_info`` carries what the tools kept (``ngym_rollout``, ``ngym_messages``); a rollout that called no tool
    is seeded from the row's ``extra_info`` (``ngym_row``, ``ngym_url``: :func:`verl_row` writes them) and verified
    with the model's text. Returns ``{"score": reward, ...verify metrics}``; a masked verify raises
    :class:`MaskedReward` (or gives NaN with ``on_masked="nan"``), never 0.0.
    """
    info = dict(extra_info or {})
    held = info.get(ROLLOUT_FIELD)
    url = info.get(URL_FIELD)
    if not isinstance(url, str):
        raise ValueError("ngym compute_score: extra_info has no ngym_url (make the rows with ngym.train.verl.verl_row)")
    wire = sync_wire(url)
    try:
        if isinstance(held, Mapping):
            rollout = Rollout.from_dict(held)
        else:
            rollout = Rollout(row_from({ROW_KEY: info.get(ROW_KEY)}))
            wire.seed(rollout)
        final = final_text_of(info.get(MESSAGES_FIELD)) if MESSAGES_FIELD in info else solution_str
        if final:
            rollout.add_message(final)
        rollout.open = True
        verified = wire.verify(rollout)
        wire.close(rollout)
    except WireError as exc:
        verified = None
        log.warning("ngym compute_score: %s", exc)
    reward = reward_of(verified)
    if reward is None:
        why = (verified or {}).get("failure_kind") or "no verify answer"
        if on_masked == "nan":
            log.warning("ngym compute_score: rollout masked (%s): score NaN", why)
            return {"score": math.nan, "ngym_masked": True}
        raise MaskedReward(f"the environment at {url} gave this rollout no reward ({why}); verl cannot skip a sample")
    metrics = {k: v for k, v in (verified or {}).items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return {**metrics, "score": reward}


def verl_row(
    row: Mapping[str, Any], url: str, tool_names: list[str], *, data_source: str = "ngym", index: int = 0
) -> dict[str, Any]:
    """One row of a verl dataset (parquet) for an ngym dataset row: the prompt, and every tool's create kwargs.

    ``prompt`` is the row's ``responses_create_params.input`` as chat messages; ``extra_info.tools_kwargs`` hands
    each tool the row (as JSON text, so parquet stores any row as is); ``extra_info.ngym_row``/``ngym_url`` let
    :func:`compute_score` verify a rollout that called no tool.
    """
    clean = dataset_row(row)
    text = json.dumps(clean)
    params = clean["responses_create_params"]
    value = params.get("input")
    messages: list[dict[str, str]] = []
    for item in [{"role": "user", "content": value}] if isinstance(value, str) else value or []:
        if isinstance(item, Mapping) and item.get("type", "message") == "message" and "role" in item:
            role = "system" if item["role"] == "developer" else str(item["role"])
            messages.append({"role": role, "content": _message_text(item)})
    if isinstance(params.get("instructions"), str):
        messages.insert(0, {"role": "system", "content": params["instructions"]})
    tools_kwargs = {name: {"create_kwargs": {ROW_KEY: text}} for name in tool_names}
    return {
        "data_source": data_source,
        "prompt": messages,
        "ability": "tools",
        "reward_model": {"style": "rule", "ground_truth": ""},
        "extra_info": {"index": index, "tools_kwargs": tools_kwargs, ROW_KEY: text, URL_FIELD: url.rstrip("/")},
        "agent_name": "tool_agent",
    }
