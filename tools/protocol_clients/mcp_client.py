"""Run recorded tool calls over MCP with the ``mcp`` SDK's own client, inside a NeMo-wire session.

The environment is served with ``expose_tools_over_mcp=true``; its ``/seed_session`` answer names the MCP
endpoint and the session token header (``"mcp": {"url_path", "headers"}``), as NeMo Gym 0.7.0 does. The calls go
over MCP (streamable HTTP), the verify over NeMo's wire (MCP has no reward): what a NeMo Gym agent with
``expose_tools_over_mcp`` does. Runs in ngym's own interpreter (the ``mcp`` SDK is one of its dependencies).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class NoMCP(RuntimeError):
    """The seed answer names no MCP endpoint (the environment does not expose its tools over MCP)."""


async def _calls(url: str, headers: dict[str, str], calls: list[tuple[str, Any]], require: set[str]) -> list[str]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    http = httpx.AsyncClient(headers=headers, timeout=120)
    outputs: list[str] = []
    listed: set[str] = set()
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        listed = {tool.name for tool in (await session.list_tools()).tools}
        # raised outside the client's task group (inside, it would come out wrapped in an ExceptionGroup)
        if not (require | {name for name, _ in calls}) - listed:
            for name, arguments in calls:
                result = await session.call_tool(name, arguments or {})
                outputs.append("".join(getattr(part, "text", "") for part in result.content))
    missing = sorted((require | {name for name, _ in calls}) - listed)
    if missing:
        raise NoMCP(f"tools {missing} are not listed over MCP (listed: {', '.join(sorted(listed)) or 'none'})")
    return outputs


def run_calls(
    base_url: str, seeded: dict[str, Any], calls: list[tuple[str, Any]], require: set[str] | None = None
) -> list[str]:
    """Make ``calls`` over the MCP endpoint the seed answer ``seeded`` names; the tools' text outputs. Raises
    :class:`NoMCP` when a tool called, or one of ``require``, is not listed."""
    meta = seeded.get("mcp") or seeded.get("resources_tools")
    if not isinstance(meta, dict) or not meta.get("url_path"):
        raise NoMCP("the seed answer names no MCP endpoint")
    headers = {str(k): str(v) for k, v in (meta.get("headers") or {}).items()}
    url = base_url.rstrip("/") + str(meta["url_path"])
    return asyncio.run(_calls(url, headers, calls, set(require or ())))
