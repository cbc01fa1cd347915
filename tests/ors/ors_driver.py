"""Drive an ngym server with the ``openreward`` SDK's own client (run in the trainer venv, tools/trainer_venv.sh).

Reads a plan (JSON) on stdin, prints what the client saw (JSON) on stdout:

    {"url": "http://127.0.0.1:PORT/ors/", "env_name": "...", "split": "example",
     "episodes": [{"index": 0, "calls": [["get_weather", {"city": "Oslo"}]], "answer": "It is cold."}],
     "parallel": false}

Both ``OPENREWARD_API_URL`` and ``OPENREWARD_SESSION_URL`` are set to ``url``, as a single-host ORS server is
used. Each episode opens a session on ``split``/``index`` (or ``task_spec``), reads its prompt and tools, makes
its calls in order and, when ``answer`` is given, calls the final-answer tool; ``parallel`` runs the episodes
at once (one session each) with the async client.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any


def _output(out: Any) -> dict[str, Any]:
    return {
        "text": "".join(getattr(b, "text", "") for b in out.blocks),
        "reward": out.reward,
        "finished": out.finished,
        "metadata": out.metadata,
    }


def _error(exc: Exception) -> dict[str, Any]:
    return {"error": type(exc).__name__, "reason": getattr(exc, "reason", None), "detail": str(exc)}


async def _episode(env: Any, plan: dict[str, Any], episode: dict[str, Any], submit: str) -> dict[str, Any]:
    from openreward.api.environments.client import Task

    if "task_spec" in episode:
        task = Task(
            server_name=env.server, environment_name=plan["env_name"], task_spec=episode["task_spec"], namespace=None
        )
        session = env.session(task=task)
    else:
        session = env.session(split=plan["split"], index=episode["index"])
    seen: dict[str, Any] = {"outputs": []}
    async with session as s:
        seen["sid"] = s.sid
        seen["prompt"] = "".join(getattr(b, "text", "") for b in await s.get_prompt())
        seen["task_tools"] = [t.name for t in await s.list_tools()]
        seen["terminal_tool"] = (await s.terminal_tool()).name if await s.terminal_tool() else None
        for name, arguments in episode.get("calls", []):
            try:
                seen["outputs"].append(_output(await s.call_tool(name, arguments)))
            except Exception as exc:  # noqa: BLE001 - the client's error is what the test compares
                seen["outputs"].append(_error(exc))
        if "answer" in episode:
            try:
                final = _output(await s.call_tool(submit, {"answer": episode["answer"]}))
            except Exception as exc:  # noqa: BLE001
                final = _error(exc)
            seen["final"] = final
            if episode.get("after_finish"):
                try:
                    seen["after_finish"] = _output(await s.call_tool(*episode["after_finish"]))
                except Exception as exc:  # noqa: BLE001
                    seen["after_finish"] = _error(exc)
    return seen


async def main(plan: dict[str, Any]) -> dict[str, Any]:
    os.environ["OPENREWARD_API_URL"] = plan["url"]
    os.environ["OPENREWARD_SESSION_URL"] = plan["url"]
    from openreward import AsyncOpenReward

    client = AsyncOpenReward(base_url=plan["url"])
    try:
        env = client.environments.get(plan["env_name"])
        seen: dict[str, Any] = {
            "splits": await env.list_splits(),
            "num_tasks": await env.num_tasks(plan["split"]),
            "tasks": [t.task_spec for t in await env.list_tasks(plan["split"])],
            "tools": [t.name for t in await env.list_tools()],
            "tool_schemas": {t.name: t.input_schema for t in await env.list_tools()},
            "terminal_tool": (await env.terminal_tool()).name if await env.terminal_tool() else None,
        }
        submit = seen["terminal_tool"]
        episodes = plan.get("episodes", [])
        if plan.get("parallel"):
            seen["episodes"] = list(await asyncio.gather(*(_episode(env, plan, e, submit) for e in episodes)))
        else:
            seen["episodes"] = [await _episode(env, plan, e, submit) for e in episodes]
        return seen
    finally:
        await client.environments.aclose()


if __name__ == "__main__":
    result = asyncio.run(main(json.load(sys.stdin)))
    json.dump(result, sys.stdout)
