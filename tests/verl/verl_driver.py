"""Runs in the trainer venv (tools/trainer_venv.sh) with the checkout on PYTHONPATH: verl's own config loader and tool
classes drive an ngym server through recorded rollouts. Reads a JSON payload on stdin, prints a JSON answer.

Modes:
- ``replay``: load the tool config with ``verl.tools.tool_registry.initialize_tools_from_config``; for each
  recorded rollout, every tool ``create``s the same instance id (one session), each recorded ``function_call`` is
  ``execute``d by the tool of its name, ``calc_reward`` verifies (with the recorded final text), every tool
  ``release``s. ``parallel``: all rollouts at once (asyncio.gather), else one after another.
- ``masked``: a rollout whose session the server lost before ``calc_reward`` (closed behind the tool's back).
- ``score``: ``ngym.train.verl.compute_score`` on the same masked rollout, with ``on_masked`` raise and nan.
- ``concurrent``: every tool creates one instance id at once, then one execute, ``calc_reward`` and the releases.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import uuid
from typing import Any

import httpx
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse
from verl.tools.tool_registry import initialize_tools_from_config


def final_text(output: list[dict[str, Any]]) -> str:
    last = output[-1] if output else {}
    if last.get("type") != "message":
        return ""
    return "".join(part.get("text", "") for part in last.get("content", []))


async def replay_one(tools: dict[str, BaseTool], rollout: dict[str, Any]) -> dict[str, Any]:
    row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
    instance = str(uuid.uuid4())
    for tool in tools.values():
        made, answer = await tool.create(instance, create_kwargs={"ngym_row": json.dumps(row)})
        assert made == instance and isinstance(answer, ToolResponse)
    outputs: list[str] = []
    step_rewards: list[Any] = []
    try:
        for item in rollout["response"]["output"]:
            if item.get("type") != "function_call":
                continue
            answer, step_reward, _metrics = await tools[item["name"]].execute(instance, json.loads(item["arguments"]))
            assert isinstance(answer, ToolResponse)
            outputs.append(answer.text or "")
            step_rewards.append(step_reward)
        reward = await next(iter(tools.values())).calc_reward(
            instance, final_text=final_text(rollout["response"]["output"])
        )
    finally:
        for tool in tools.values():
            await tool.release(instance)
    recorded = [i["output"] for i in rollout["response"]["output"] if i.get("type") == "function_call_output"]
    return {"reward": reward, "outputs": outputs, "recorded_outputs": recorded, "step_rewards": step_rewards}


async def replay(payload: dict[str, Any]) -> dict[str, Any]:
    loaded = initialize_tools_from_config(payload["config"])
    tools = {tool.name: tool for tool in loaded}
    rollouts = payload["rollouts"]
    if payload.get("parallel"):
        results = await asyncio.gather(*(replay_one(tools, r) for r in rollouts))
    else:
        results = [await replay_one(tools, r) for r in rollouts]
    classes = sorted({f"{type(t).__module__}.{type(t).__qualname__}" for t in loaded})
    schemas = {t.name: t.tool_schema.model_dump(exclude_none=True) for t in loaded}
    return {
        "results": results,
        "classes": classes,
        "schemas": schemas,
        "all_base_tools": all(isinstance(t, BaseTool) for t in loaded),
    }


async def masked(payload: dict[str, Any]) -> dict[str, Any]:
    from ngym.train.verl import _instances

    tools = {tool.name: tool for tool in initialize_tools_from_config(payload["config"])}
    rollout = payload["rollouts"][0]
    row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
    tool = tools[next(i["name"] for i in rollout["response"]["output"] if i.get("type") == "function_call")]
    instance, _ = await tool.create(None, create_kwargs={"ngym_row": row})
    for item in rollout["response"]["output"]:
        if item.get("type") == "function_call":
            await tools[item["name"]].execute(instance, json.loads(item["arguments"]))
    held = _instances[(tool.url, instance)]
    cookie = "; ".join(f"{k}={v}" for k, v in held.rollout.cookies.items())
    httpx.post(
        f"{tool.url}/close_session", json={}, headers={"cookie": cookie}
    ).raise_for_status()  # the server lost it
    reward = await tool.calc_reward(instance)
    answer = tool.verify_answer(instance) or {}
    await tool.release(instance)
    return {"reward": reward, "mask_sample": answer.get("mask_sample"), "failure_kind": answer.get("failure_kind")}


def score(payload: dict[str, Any]) -> dict[str, Any]:
    """compute_score on a rollout the tools kept (as verl's agent loop hands it over), its session lost."""
    from ngym.train.verl import MaskedReward, compute_score
    from ngym.train.wire import Rollout, SyncWire

    rollout = payload["rollouts"][0]
    row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
    url = payload["url"]
    answers: dict[str, Any] = {}
    for on_masked in ("raise", "nan"):
        wire = SyncWire(url)
        kept = Rollout(row)
        wire.seed(kept)
        for item in rollout["response"]["output"]:
            if item.get("type") == "function_call":
                wire.call(kept, item["name"], json.loads(item["arguments"]))
        wire.close(kept)  # lost before the reward function runs
        extra_info = {"ngym_rollout": {**kept.as_dict(), "open": True}, "ngym_url": url}
        try:
            result = compute_score("ngym", "", "", extra_info, on_masked=on_masked)
            answers[on_masked] = {
                "score": None if math.isnan(result["score"]) else result["score"],
                "nan": math.isnan(result["score"]),
            }
        except MaskedReward as exc:
            answers[on_masked] = {"raised": str(exc)}
    # and a rollout that is not lost scores the recorded reward
    wire = SyncWire(url)
    kept = Rollout(row)
    wire.seed(kept)
    for item in rollout["response"]["output"]:
        if item.get("type") == "function_call":
            wire.call(kept, item["name"], json.loads(item["arguments"]))
    answers["kept"] = compute_score("ngym", "", "", {"ngym_rollout": kept.as_dict(), "ngym_url": url})["score"]
    return answers


async def concurrent(payload: dict[str, Any]) -> dict[str, Any]:
    """Every tool ``create``s one instance id at once (the first seeds, the others wait for it), then the first
    tool executes once, ``calc_reward``, and every create that succeeded is released."""
    from ngym.train.verl import _instances

    tools = list(initialize_tools_from_config(payload["config"]))
    instance = str(uuid.uuid4())
    kwargs = {"create_kwargs": {"ngym_row": json.dumps(payload["row"])}}
    made = await asyncio.gather(*(t.create(instance, **kwargs) for t in tools), return_exceptions=True)
    creates = [type(m).__name__ if isinstance(m, BaseException) else "ok" for m in made]
    answer: dict[str, Any] = {"creates": creates}
    if "ok" in creates:
        response, _, _ = await tools[0].execute(instance, payload.get("arguments", {}))
        answer["output"] = response.text
        answer["reward"] = await tools[0].calc_reward(instance, final_text="done")
        for tool, made_one in zip(tools, made, strict=True):
            if not isinstance(made_one, BaseException):
                await tool.release(instance)
    answer["left"] = sum(1 for (_, held_id) in _instances if held_id == instance)
    return answer


def main() -> None:
    payload = json.load(sys.stdin)
    mode = payload["mode"]
    if mode == "replay":
        answer = asyncio.run(replay(payload))
    elif mode == "masked":
        answer = asyncio.run(masked(payload))
    elif mode == "score":
        answer = score(payload)
    elif mode == "concurrent":
        answer = asyncio.run(concurrent(payload))
    else:
        raise SystemExit(f"unknown mode {mode}")
    print("NGYM-RESULT " + json.dumps(answer))


if __name__ == "__main__":
    main()
