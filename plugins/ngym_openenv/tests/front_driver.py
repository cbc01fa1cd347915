"""Run in OpenEnv's own interpreter by the front tests: OpenEnv's clients drive an ngym server's ``/openenv``.

``python front_driver.py`` with, on standard input, ``{"url": BASE, "client": "generic" | "mcp", "episodes":
[...]}``, each episode ``{"reset": {...}, "steps": [{"tool_name", "arguments"}...], "final": TEXT}``, all
episodes run at once (``asyncio.gather``: one connection and one server session each). Imports nothing of ngym.

- ``generic``: ``GenericEnvClient`` over ``/ws``: ``reset(**reset)``, ``step({"tool_name", "arguments"})`` per
  step, then ``step({"message": final})``;
- ``mcp``: ``MCPToolClient`` (production mode: an HTTP MCP session with the WebSocket attached to it):
  ``reset(**reset)``, ``list_tools()``, ``call_tool(name, **arguments)`` per step, then
  ``step(CallToolAction("final_answer", {"content": final}))``.

Prints ``FRONT <json>``: per episode ``{"reward", "done", "outputs": [...], "tools": [...]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


async def generic(url: str, episode: dict[str, Any]) -> dict[str, Any]:
    from openenv.core.generic_client import GenericEnvClient

    async with GenericEnvClient(base_url=url) as client:
        reset = await client.reset(**episode.get("reset", {}))
        outputs = []
        for step in episode["steps"]:
            result = await client.step({"tool_name": step["tool_name"], "arguments": step.get("arguments") or {}})
            outputs.append(result.observation.get("result"))
        final = await client.step({"message": episode["final"]})
        state = await client.state()
        return {
            "reward": final.reward,
            "done": final.done,
            "outputs": outputs,
            "tools": [t.get("name") for t in reset.observation.get("available_tools") or []],
            "state": state,
        }


async def mcp(url: str, episode: dict[str, Any]) -> dict[str, Any]:
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    client = MCPToolClient(base_url=url)
    await client.connect()
    try:
        await client.reset(**episode.get("reset", {}))
        tools = [t.name for t in await client.list_tools()]
        outputs = [
            await client.call_tool(step["tool_name"], **(step.get("arguments") or {})) for step in episode["steps"]
        ]
        final = await client.step(CallToolAction(tool_name="final_answer", arguments={"content": episode["final"]}))
        return {"reward": final.reward, "done": final.done, "outputs": outputs, "tools": tools}
    finally:
        await client.close()


async def main() -> None:
    request = json.loads(sys.stdin.read())
    run = generic if request["client"] == "generic" else mcp
    results = await asyncio.gather(*(run(request["url"], e) for e in request["episodes"]))
    print("FRONT " + json.dumps(list(results), default=str))


if __name__ == "__main__":
    asyncio.run(main())
