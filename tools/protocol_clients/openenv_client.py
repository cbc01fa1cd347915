"""Replay recorded rollouts with OpenEnv's own generic client (``openenv``), in OpenEnv's venv.

Run by ``tools/protocol_matrix.py`` under an interpreter holding ``openenv==0.10.0``; imports nothing of ngym.
Reads ``{"url": ".../openenv", "episodes": [{"row": ROW, "actions": [["call", TOOL, ARGS] | ["answer", TEXT],
...]}]}`` on stdin and prints one JSON line: ``{"episodes": [{"reward": R | null, "done": bool, "error": TEXT |
null}]}``.

Each episode is ``GenericEnvClient`` over the front's WebSocket: ``reset(row=ROW)``, then per action a
``step({"tool_name", "arguments"})`` (a call) or a ``step({"message": TEXT})`` (an answer), until a step is done.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


async def episode(url: str, plan: dict[str, Any]) -> dict[str, Any]:
    from openenv.core.generic_client import GenericEnvClient

    try:
        async with GenericEnvClient(base_url=url) as client:
            await client.reset(row=plan["row"])
            reward, done = None, False
            for action in plan["actions"]:
                if action[0] == "call":
                    result = await client.step({"tool_name": action[1], "arguments": action[2] or {}})
                else:
                    result = await client.step({"message": action[1]})
                if result.reward is not None:
                    reward = result.reward
                done = bool(result.done)
                if done:
                    break
            return {"reward": reward, "done": done, "error": None}
    except Exception as exc:  # noqa: BLE001 - the client's own error is the cell's reason
        return {"reward": None, "done": False, "error": f"{type(exc).__name__}: {exc}"[:400]}


async def main(plan: dict[str, Any]) -> dict[str, Any]:
    return {"episodes": [await episode(plan["url"], e) for e in plan["episodes"]]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.load(sys.stdin))), default=str))
