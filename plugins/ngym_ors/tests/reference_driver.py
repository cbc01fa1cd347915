"""openreward's own client against openreward's own server, both run here (an interpreter with openreward).

Reads a plan on stdin: ``{"folder": ..., "module": "server", "environment": "TallyEnvironment", "split": "train",
"episodes": [{"index": 0, "calls": [["add", {"amount": 3}], ["submit", {}]], "final": "text or null"}]}``; serves
the module's environment
with ``openreward.environments.Server`` on a free port and plays each episode with ``openreward``'s client (a final
text goes to the terminal tool, as ORS harnesses do). Prints ``{"episodes": [{"outputs": [...], "rewards": [...]}]}``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import socket
import sys
import threading
import time
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(cls: Any, port: int) -> None:
    import uvicorn
    from openreward.environments import Server

    server = uvicorn.Server(uvicorn.Config(Server([cls]).app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    import urllib.request

    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("openreward's server did not start")


async def _episode(env: Any, split: str, episode: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {"outputs": [], "rewards": []}
    async with env.session(split=split, index=episode["index"]) as s:
        for name, arguments in episode["calls"]:
            try:
                out = await s.call_tool(name, arguments)
            except Exception as exc:  # noqa: BLE001 - the client's error is what is compared
                seen["outputs"].append({"error": str(exc)})
                continue
            seen["outputs"].append({"text": "".join(getattr(b, "text", "") for b in out.blocks)})
            seen["rewards"].append(out.reward)
        if episode.get("final") is not None:
            term = await s.terminal_tool()
            out = await s.call_tool(term.name, {term.arg: episode["final"]})
            seen["rewards"].append(out.reward)
    return seen


async def main(plan: dict[str, Any]) -> dict[str, Any]:
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sys.path.insert(0, plan["folder"])
    cls = getattr(importlib.import_module(plan.get("module", "server")), plan["environment"])
    port = _free_port()
    _serve(cls, port)
    url = f"http://127.0.0.1:{port}"
    import os

    os.environ["OPENREWARD_API_URL"] = url
    os.environ["OPENREWARD_SESSION_URL"] = url
    from openreward import AsyncOpenReward

    client = AsyncOpenReward(base_url=url)
    try:
        env = client.environments.get(cls.name().lower())
        episodes = [await _episode(env, plan["split"], e) for e in plan["episodes"]]
    finally:
        await client.environments.aclose()
    return {"episodes": episodes}


if __name__ == "__main__":
    result = asyncio.run(main(json.load(sys.stdin)))
    print("\n" + json.dumps(result))  # the last line (openreward may log to stdout before it)
