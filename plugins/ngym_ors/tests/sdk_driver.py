"""``openreward``'s own client methods against one ORS server; run with an interpreter that has openreward.

``python sdk_driver.py URL ENV_NAME``: calls the SDK's environment-level methods (splits, tasks with pagination,
tools) and plays a few sessions of the ledger environment (``envs/conform_ors``), errors included. Prints one JSON
object: each step's result, or the exception the SDK raised as ``{"raised": type name, "reason": ..., "text": ...}``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the SDK's error is what is compared
        return {"raised": type(exc).__name__, "reason": getattr(exc, "reason", None), "text": str(exc)[:300]}


def _output(out: Any) -> Any:
    if isinstance(out, dict):  # an exception, as _outcome shows it
        return out
    text = "".join(getattr(b, "text", "") for b in out.blocks)
    return {"text": text, "reward": out.reward, "finished": out.finished}


def main(url: str, env_name: str) -> dict[str, Any]:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    logging.disable(logging.CRITICAL)
    os.environ["OPENREWARD_API_URL"] = os.environ["OPENREWARD_SESSION_URL"] = url
    from openreward import OpenReward

    client = OpenReward(base_url=url)
    env = client.environments.get(env_name)
    seen: dict[str, Any] = {
        "splits": _outcome(env.list_splits),
        "num_tasks": _outcome(lambda: env.num_tasks("train")),
        "num_tasks unknown split": _outcome(lambda: env.num_tasks("nope")),
        "task out of range": _outcome(lambda: env.get_task("train", 99)),
        "task_range from 1": _outcome(lambda: len(env.get_task_range("train", 1, None))),
        "task_range last": _outcome(lambda: len(env.get_task_range("train", -1))),
        "tasks": _outcome(lambda: len(env.list_tasks("test"))),
        "tools": _outcome(lambda: sorted(t.name for t in env.list_tools())),
        "terminal tool": _outcome(lambda: env.terminal_tool()),
        "openai tools": _outcome(lambda: sorted(t["name"] for t in env.list_tools(format="openai"))),
    }
    with env.session(split="train", index=1) as session:
        seen["prompt"] = _outcome(lambda: [b.text for b in session.get_prompt()])
        seen["messages"] = _outcome(lambda: session.get_messages(format="openai"))
        seen["session tools"] = _outcome(lambda: sorted(t.name for t in session.list_tools()))
        seen["unknown tool"] = _output(_outcome(lambda: session.call_tool("nosuch", {})))
        seen["wrong type"] = _output(_outcome(lambda: session.call_tool("deposit", {"amount": "two"})))
        seen["missing argument"] = _output(_outcome(lambda: session.call_tool("deposit", {})))
        seen["not a dict"] = _output(_outcome(lambda: session.call_tool("deposit", [5])))  # type: ignore[arg-type]
        seen["deposit"] = _output(_outcome(lambda: session.call_tool("deposit", {"amount": 5, "memo": "pay"})))
        seen["step reward"] = _output(_outcome(lambda: session.call_tool("balance", {})))
        seen["close"] = _output(_outcome(lambda: session.call_tool("close", {})))
        seen["after finished"] = _output(_outcome(lambda: session.call_tool("deposit", {"amount": 1})))
    with env.session(split="test", index=0) as session:
        seen["raising tool"] = _output(_outcome(lambda: session.call_tool("explode", {})))
        seen["after raise"] = _output(_outcome(lambda: session.call_tool("balance", {})))
    seen["unknown split session"] = _outcome(lambda: env.session(split="nope", index=0).__enter__() and "opened")
    listed = env.list_tasks("train")
    with env.session(task=listed[2]) as session:
        seen["listed task"] = _output(_outcome(lambda: session.call_tool("deposit", {"amount": 7})))
        seen["listed task close"] = _output(_outcome(lambda: session.call_tool("close", {})))
    client.close()
    return seen


if __name__ == "__main__":
    result = main(sys.argv[1], sys.argv[2])
    print("\n" + json.dumps(result, default=repr))
