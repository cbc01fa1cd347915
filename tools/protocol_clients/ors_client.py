"""Replay recorded rollouts with the Open Reward Standard's own client (``openreward``).

Run by ``tools/protocol_matrix.py`` under ``tools/trainer_venv.sh``'s interpreter; imports nothing of ngym. Reads
``{"url": ".../ors/", "env_name": NAME, "episodes": [{"task_spec": ROW, "actions": [["call", TOOL, ARGS] |
["answer", TEXT], ...]}]}`` on stdin and prints one JSON line: ``{"tools": [...], "terminal_tool": NAME | null,
"episodes": [{"reward": R | null, "finished": bool, "error": TEXT | null}]}``.

Each episode is one ORS session on its task (the dataset row): its actions in order, a call as the tool's call
and an answer as the environment's terminal tool (ngym's ``submit_answer``), until a tool output says finished.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any


async def episode(env: Any, env_name: str, plan: dict[str, Any], terminal: str | None) -> dict[str, Any]:
    from openreward.api.environments.client import Task

    task = Task(server_name=env.server, environment_name=env_name, task_spec=plan["task_spec"], namespace=None)
    reward: Any = None
    finished = False
    try:
        async with env.session(task=task) as session:
            for action in plan["actions"]:
                if action[0] == "call":
                    out = await session.call_tool(action[1], action[2] or {})
                elif terminal is not None:
                    out = await session.call_tool(terminal, {"answer": action[1]})
                else:
                    continue
                if out.reward is not None:
                    reward = out.reward
                finished = out.finished
                if finished:
                    break
    except Exception as exc:  # noqa: BLE001 - the client's own error is the cell's reason
        return {"reward": None, "finished": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
    return {"reward": reward, "finished": finished, "error": None}


async def main(plan: dict[str, Any]) -> dict[str, Any]:
    os.environ["OPENREWARD_API_URL"] = os.environ["OPENREWARD_SESSION_URL"] = plan["url"]
    from openreward import AsyncOpenReward

    client = AsyncOpenReward(base_url=plan["url"])
    try:
        env = client.environments.get(plan["env_name"])
        tools = [t.name for t in await env.list_tools()]
        terminal_tool = await env.terminal_tool()
        terminal = terminal_tool.name if terminal_tool else None
        episodes = [await episode(env, plan["env_name"], e, terminal) for e in plan["episodes"]]
        return {"tools": tools, "terminal_tool": terminal, "episodes": episodes}
    finally:
        await client.environments.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.load(sys.stdin))), default=str))
