"""What the OpenEnv front of one server shares between its episodes: the in-process client, rows, tools, sessions."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ngym.server.fronts.gymnasium import is_gymnasium_app
from ngym.server.fronts.mcp import MCPTool, harvest_tools
from ngym.server.fronts.openenv.episode import FINAL_ANSWER_TOOL, Episode
from ngym.server.fronts.openenv.rows import RepeatedMessages, RowPicker, example_rows_file, read_rows
from ngym.server.sessions.routing import RouteSlot
from ngym.server.sessions.store import SessionLimitReached

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ngym.server.pipeline.resources import SimpleResourcesServer

#: How often, at most, a new held episode looks for abandoned ones (``OpenEnvFront._reclaim_idle``).
_SWEEP_SECONDS = 30.0

_FINAL_ANSWER = MCPTool(
    name=FINAL_ANSWER_TOOL,
    description="Give the final answer: ends the episode, which is then verified and rewarded.",
    input_schema={
        "type": "object",
        "properties": {"content": {"type": "string", "description": "The final answer."}},
        "required": ["content"],
    },
)


class OpenEnvFront:
    """One server's OpenEnv front: episodes run the server's routes in process on ``app``."""

    def __init__(self, server: SimpleResourcesServer, app: FastAPI) -> None:
        self.server = server
        self.name = server.config.name or type(server).__name__
        # Through the whole app (middleware, session binding, validation), as an agent's request would go.
        self.app = app
        self.cookie_name = server.sessions.signer.cookie_name
        self.rows = RowPicker(read_rows(example_rows_file(type(server))))
        #: reset messages kept parsed (a group's generations reset with the same row)
        self.messages = RepeatedMessages()
        #: a Gymnasium-style environment (``/reset`` + ``/step``): its tools run inside ``/step``, not as routes
        self.gymnasium = is_gymnasium_app(app)
        chosen = None if self.gymnasium else server.mcp_tools(list(harvest_tools(app).values()), None)
        self.tools: dict[str, MCPTool] = {tool.name: tool for tool in chosen or []}
        #: episodes opened over HTTP (``/reset`` with a cookie, MCP's ``openenv/session/create``), oldest first;
        #: a WebSocket's own episode lives and dies with its connection and is not listed here
        self.episodes: OrderedDict[str, Episode] = OrderedDict()
        self.attached: set[str] = set()
        #: this process's place behind ``--workers`` (HAProxy): a held episode's id is drawn to route back here
        self.slot = RouteSlot.from_env()
        self._swept = time.monotonic()
        server.sessions.after_sweep(self._reclaim_after_sweep)

    # ---- tools -------------------------------------------------------------------------------------------------

    def declared_tools(self, row: dict[str, Any]) -> set[str] | None:
        """Names of the row's function tools; None when it declares none (then any tool route may be called)."""
        params = row.get("responses_create_params") or {}
        tools = params.get("tools") or []
        names = {t.get("name") for t in tools if isinstance(t, dict) and t.get("type") == "function"}
        return {n for n in names if n} or None

    def describe_row(self, row: dict[str, Any]) -> tuple[set[str] | None, list[dict[str, Any]]]:
        """What a reset says about ``row``: its declared tools (``declared_tools``) and the tools it offers
        (``tool_specs``)."""
        return self.declared_tools(row), self.tool_specs(row.get("responses_create_params") or {})

    def tool_specs(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The tools a reset offers: the row's own declarations, else every tool route (MCP form)."""
        declared = [t for t in params.get("tools") or [] if isinstance(t, dict)]
        return declared or self.mcp_tool_list()

    def mcp_tool_list(self) -> list[dict[str, Any]]:
        """``tools/list``'s answer: each tool route with its body schema, and ``final_answer`` to end an episode."""
        tools = list(self.tools.values())
        if FINAL_ANSWER_TOOL not in self.tools:
            tools.append(_FINAL_ANSWER)
        return [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools]

    # ---- episodes held between HTTP requests -------------------------------------------------------------------

    def new_episode(self) -> Episode:
        return Episode(self)

    async def open_episode(self) -> Episode:
        """A new episode kept under its id (``SessionLimitReached`` when the server's ``max_sessions`` are held).

        The id is drawn to hash to this process's slot (``RouteSlot.new_id``): behind ``ngym run --workers N`` the
        proxy sends every request naming it (the episode cookie, ``/ws?session_id=``, an MCP call's
        ``params.session_id``) to this process, which holds the episode.

        At most ``max_sessions`` episodes are held. To make room, episodes that hold no live session are let go,
        oldest first: never reset (an ``openenv/session/create`` no WebSocket attached to), finished, or idle past
        ``session_ttl_seconds`` (the server expired their sessions). An episode in progress is never let go for a
        new one, so no volume of ``/reset`` or ``openenv/session/create`` requests ends another client's episode:
        past the bound they are refused, as a seed past ``max_sessions`` is."""
        await self._reclaim_idle()
        limit = max(1, self.server.sessions.store.max_sessions)
        if len(self.episodes) >= limit:
            spare = [key for key, held in self.episodes.items() if key not in self.attached and not held.in_progress]
            for key in spare[: len(self.episodes) - limit + 1]:
                await self.drop_episode(key)
        if len(self.episodes) >= limit:
            raise SessionLimitReached(f"{limit} OpenEnv episodes are in progress")
        episode = Episode(self, self.slot.new_id())
        self.episodes[episode.episode_id] = episode
        return episode

    def find_episode(self, episode_id: str | None) -> Episode | None:
        """The held episode ``episode_id`` (marked used now), or None."""
        episode = self.episodes.get(episode_id) if episode_id else None
        if episode is not None:
            episode.last_used = time.monotonic()
        return episode

    def elsewhere(self, episode_id: str | None) -> str | None:
        """Why an episode id this process does not hold is not served here when another process of its routing set
        holds it (that one is down, or the request went around the proxy): None for an id of this process's own.
        Such a request is never answered as "no episode, reset first": the episode is alive, on a worker that will
        answer again."""
        if not episode_id or self.slot.owns(episode_id):
            return None
        return (
            f"episode {episode_id!r} belongs to another worker of this server (this is {self.slot.describe()}); that "
            "worker is down or restarting, or the request went around the proxy: retry through the server's address"
        )

    async def _reclaim_idle(self) -> None:
        """Let go of held episodes idle longer than the server's session TTL (at most every ``_SWEEP_SECONDS``):
        the server has expired their sessions, and an abandoned episode's trajectory is freed with them."""
        now = time.monotonic()
        if now - self._swept < _SWEEP_SECONDS:
            return
        self._swept = now
        ttl = self.server.config.session_ttl_seconds
        idle = [
            key
            for key, held in self.episodes.items()
            if key not in self.attached and now - held.last_used > ttl and not held.lock.locked()
        ]
        for key in idle:
            await self.drop_episode(key)

    async def _reclaim_after_sweep(self) -> None:
        """After the server's session sweep (it closed the sessions idle past the TTL): let go of their episodes,
        even when no new one opens."""
        self._swept = 0.0
        await self._reclaim_idle()

    async def drop_episode(self, episode_id: str) -> bool:
        """Close a held episode's session and forget it; False when there is none."""
        episode = self.episodes.pop(episode_id, None)
        if episode is None:
            return False
        async with episode.lock:
            await episode.close()
        return True
