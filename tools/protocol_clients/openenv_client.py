"""Replay recorded rollouts with OpenEnv's own generic client (``openenv``), in OpenEnv's venv.

Run by ``tools/protocol_matrix.py`` under an interpreter holding ``openenv==0.10.0``; imports nothing of ngym.
Reads ``{"url": ".../openenv", "episodes": [{"row": ROW, "calls": [[tool, args]...], "answer": TEXT}]}`` on
stdin and prints one JSON line: ``{"episodes": [{"reward": R | null, "done": bool, "error": TEXT | null}]}``.

Each episode is ``GenericEnvClient`` over the front's WebSocket: ``reset(row=ROW)``, one
``step({"tool_name", "arguments"})`` per recorded call, then ``step({"message": answer})``, which verifies.
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
            result = None
            for name, arguments in plan["calls"]:
                result = await client.step({"tool_name": name, "arguments": arguments or {}})
                if result.done:
                    break
            if result is None or not result.done:
                result = await client.step({"message": plan["answer"]})
            return {"reward": result.reward, "done": bool(result.done), "error": None}
    except Exception as exc:  # noqa: BLE001 - the client's own error is the cell's reason
        return {"reward": None, "done": False, "error": f"{type(exc).__name__}: {exc}"[:400]}


async def main(plan: dict[str, Any]) -> dict[str, Any]:
    return {"episodes": [await episode(plan["url"], e) for e in plan["episodes"]]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.load(sys.stdin))), default=str))
