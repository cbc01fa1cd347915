"""The worker's verifiers <= 0.3 environment (``load_environment(**kwargs) -> vf.Environment``), served as
``worker`` describes: seed runs ``init_state`` and ``setup_state`` on the row; a tool call is the environment's own
``env_response`` on an assistant message carrying that one call; verify sets the completion and runs
``rubric.score_rollout``.

Runs in the environment's own interpreter, beside ``worker.py``: the standard library, verifiers and the
environment only.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .worker_base import EXAMPLES, BadRequest, Refused, Sessions, _answer, _plain, _text


class LegacyEnvironment(Sessions):
    api = "legacy"

    def __init__(self, module: Any, args: dict[str, Any]) -> None:
        import verifiers as vf

        self.vf = vf
        os.environ.setdefault("OPENAI_API_KEY", "ngym-no-model")  # init_state builds a client it never calls here
        self.env = module.load_environment(**args)
        env = self.env
        environment_class = getattr(vf, "Environment", None)  # <= 0.3's base class (0.4 has none)
        if environment_class is not None and not isinstance(env, environment_class):
            raise Refused(
                f"load_environment() returned a {type(env).__module__}.{type(env).__name__}, not a verifiers"
                " Environment: ngym serves verifiers' own Environment API (its dataset, tools and rubric)"
            )
        if getattr(env, "requires_group_rollouts", False) or _has_group_rewards(env.rubric):
            raise Refused(
                f"{type(env).__name__}'s rubric has group-level reward functions (they score several rollouts"
                " together), which one rollout's /verify cannot compute"
            )
        if isinstance(env, vf.ToolEnv) or type(env).__name__ in ("SingleTurnEnv",):
            self.kind = type(env).__name__
        elif isinstance(env, vf.MultiTurnEnv) and not isinstance(env, vf.SingleTurnEnv):
            raise Refused(
                f"{type(env).__name__} is a MultiTurnEnv whose env_response speaks between model turns: a"
                " resources server only answers tool calls, so this game is not served"
            )
        else:
            self.kind = type(env).__name__
        super().__init__()
        self._rows: list[dict[str, Any]] | None = None

    def _dataset(self) -> list[dict[str, Any]]:
        if self._rows is None:
            dataset = None
            for getter in ("get_eval_dataset", "get_dataset"):
                try:
                    dataset = getattr(self.env, getter)()
                except Exception:  # no such split: try the other
                    continue
                if dataset is not None:
                    break
            self._rows = [dict(row) for row in dataset] if dataset is not None else []
        return self._rows

    def _tool_defs(self) -> list[dict[str, Any]]:
        defs = []
        for tool in getattr(self.env, "tool_defs", None) or []:
            tool = _plain(tool)
            defs.append(
                {
                    "name": tool["name"],
                    "description": tool.get("description", ""),
                    "parameters": tool.get("parameters", {}),
                }
            )
        return defs

    def describe(self) -> dict[str, Any]:
        rubric = self.env.rubric
        rewards = [{"name": name, "weight": weight} for name, weight in _rubric_weights(rubric)]
        rows = self._dataset()
        tools = self._tool_defs()
        examples = [
            {
                "seed": {"idx": i},
                "prompt": _plain(_legacy_prompt(self.env, row)),
                "tools": tools,
                "answer": _answer(row.get("answer")),
            }
            for i, row in enumerate(rows[:EXAMPLES])
        ]
        return {
            "api": self.api,
            "kind": self.kind,
            "tools": tools,
            "rewards": rewards,
            "num_tasks": len(rows),
            "examples": examples,
        }

    async def seed(self, session: str, row: dict[str, Any]) -> dict[str, Any]:
        if "idx" in row:
            rows = self._dataset()
            idx = row["idx"]
            if not isinstance(idx, int) or not 0 <= idx < len(rows):
                raise BadRequest(f"idx {idx!r} is not a row of this environment's dataset (0..{len(rows) - 1})")
            source = dict(rows[idx])
        else:
            source = {k: row[k] for k in ("prompt", "answer", "info", "task", "example_id", "question") if k in row}
            if "prompt" not in source and "question" not in source:
                raise BadRequest("seed with a dataset row's idx ({'idx': N}) or a row (prompt, answer, info)")
        source.setdefault("example_id", row.get("idx", 0))
        if "prompt" not in source:
            source["prompt"] = _legacy_prompt(self.env, source)
        state = await self.env.init_state(source, self.vf.ClientConfig(), "ngym")
        setup = await self.env.setup_state(state)
        if setup is not None:
            state = setup
        self.sessions[session] = {"state": state, "history": []}
        return {"prompt": _plain(state["prompt"])}

    async def tool(self, session: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        live = self._session(session)
        tool_map = getattr(self.env, "tool_map", {}) or {}
        if name not in tool_map:
            raise BadRequest(f"no tool {name!r} (tools: {', '.join(sorted(tool_map)) or 'none'})")
        state = live["state"]
        call_id = f"ngym_{len(live['history'])}"
        assistant = self.vf.AssistantMessage(
            content=None, tool_calls=[self.vf.ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))]
        )
        messages = [*state["prompt"], *live["history"], assistant]
        # The environment's own env_response: parsing, a StatefulToolEnv's update_tool_args, its error formatter.
        replies = await self.env.env_response(messages, state)
        live["history"].extend([assistant, *replies])
        reply = next((r for r in replies if getattr(r, "tool_call_id", None) == call_id), replies[0])
        return {"output": _text(reply.content)}

    async def verify(self, session: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        # verifiers.utils is the <= 0.2 spelling; 0.3 moved it to verifiers.legacy.utils and aliases the old name
        from verifiers.utils.message_utils import normalize_messages

        live = self._session(session)
        state = live["state"]
        completion = normalize_messages(messages, field_name="completion")
        state["completion"] = completion
        state["is_completed"] = True
        # One trajectory step per model turn, as the rollout loop records them (num_turns and friends count it).
        prompt = list(state["prompt"])
        steps = []
        for i, message in enumerate(completion):
            if message.role == "assistant":
                steps.append(
                    {
                        "prompt": prompt + completion[:i],
                        "completion": [message],
                        "response": None,
                        "tokens": None,
                        "reward": None,
                        "advantage": None,
                        "is_truncated": False,
                        "trajectory_id": state.get("trajectory_id"),
                        "extras": {},
                    }
                )
        state["trajectory"] = steps
        await self.env.rubric.score_rollout(state)
        metrics = dict(state.get("metrics") or {})
        weights = dict(_rubric_weights(self.env.rubric))
        rewards = {name: {"score": metrics[name], "weight": weights.get(name, 0.0)} for name in metrics}
        return {"reward": state["reward"], "rewards": rewards, "metrics": metrics}


def _legacy_prompt(env: Any, row: dict[str, Any]) -> Any:
    if row.get("prompt") is not None:
        return row["prompt"]
    messages = []
    if getattr(env, "system_prompt", None):
        messages.append({"role": "system", "content": env.system_prompt})
    messages.append({"role": "user", "content": row.get("question", "")})
    return messages


def _rubric_weights(rubric: Any) -> list[tuple[str, float]]:
    """(function name, weight) of every function a rubric (or a RubricGroup's rubrics) scores with."""
    rubrics = getattr(rubric, "rubrics", None)
    if rubrics:
        return [pair for sub in rubrics for pair in _rubric_weights(sub)]
    return [(fn.__name__, float(w)) for fn, w in zip(rubric.funcs, rubric.weights, strict=False)]


def _has_group_rewards(rubric: Any) -> bool:
    rubrics = getattr(rubric, "rubrics", None)
    if rubrics:
        return any(_has_group_rewards(sub) for sub in rubrics)
    return bool(getattr(rubric, "has_group_rewards", False))
