"""OpenEnv's ``/ws`` protocol, client side: one WebSocket = one environment instance on the OpenEnv server.

OpenEnv's server creates a fresh environment (``env_factory()``) for every WebSocket it accepts, in that session's
executor (a thread of its own, or the one shared thread when the environment sets
``REQUIRES_SINGLE_THREAD_EXECUTOR``), refuses a connection beyond ``max_concurrent_envs`` (the limit its app
declares, 1 unless the environment sets ``SUPPORTS_CONCURRENT_SESSIONS``), and calls the environment's ``close()``
once when the WebSocket ends. Messages are JSON: ``{"type": "reset"|"step"|"state"|"close", "data": {...}}``;
answers are ``{"type": "observation"|"state"|"error", "data": {...}}``, an observation being
``{"observation": {...}, "reward": float|None, "done": bool}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

#: OpenEnv's error code when the server already runs as many environments as its app allows.
CAPACITY_REACHED = "CAPACITY_REACHED"


class OpenEnvError(Exception):
    """The OpenEnv server answered with an error message (``code`` is OpenEnv's ``WSErrorCode`` value)."""

    def __init__(self, message: str, code: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.details = message, code, details or {}


class OpenEnvUnreachable(OpenEnvError):
    """The OpenEnv server could not be reached, or dropped the connection (the episode is lost)."""


def ws_url(base_url: str) -> str:
    """The ``/ws`` endpoint of an OpenEnv server given as ``http(s)://host:port`` or ``ws(s)://host:port[/ws]``."""
    url = base_url.rstrip("/")
    if url.startswith("http://"):
        url = "ws://" + url.removeprefix("http://")
    elif url.startswith("https://"):
        url = "wss://" + url.removeprefix("https://")
    return url if url.endswith("/ws") else url + "/ws"


class Episode:
    """One environment instance on an OpenEnv server, driven over its ``/ws`` connection.

    Messages on one connection are answered in order, so calls are serialised with a lock: two tool calls of one
    rollout arriving at once still reach the environment one after the other, as with OpenEnv's own client.
    """

    def __init__(self, connection: ClientConnection, timeout: float) -> None:
        self._connection = connection
        self._timeout = timeout
        self._lock = asyncio.Lock()
        self.closed = False

    @classmethod
    async def open(cls, base_url: str, *, timeout: float = 60.0, uds: str | None = None) -> Episode:
        """Connect (the server creates the environment instance now). ``OpenEnvUnreachable`` if it cannot.

        ``uds``: the unix socket of a server ngym started (``launch.start(..., private=True)``); ``base_url`` then
        only names the host in the handshake."""
        url = ws_url(base_url)
        try:
            if uds:
                opening = unix_connect(uds, url, max_size=None, open_timeout=timeout)
            else:
                opening = connect(url, max_size=None, open_timeout=timeout)
            connection = await asyncio.wait_for(opening, timeout=timeout)
        except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
            where = f"{url} (unix socket {uds})" if uds else url
            raise OpenEnvUnreachable(f"cannot connect to the OpenEnv server at {where}: {exc}") from exc
        return cls(connection, timeout)

    async def reset(self, **data: Any) -> dict[str, Any]:
        """``reset`` with these keyword arguments (OpenEnv passes on those the environment's ``reset`` accepts)."""
        return await self.request({"type": "reset", "data": data})

    async def step(self, action: dict[str, Any]) -> dict[str, Any]:
        """``step`` with an action (the JSON form of the environment's Action model)."""
        return await self.request({"type": "step", "data": action})

    async def state(self) -> dict[str, Any]:
        """The environment's ``state`` (its State model as JSON)."""
        return await self.request({"type": "state"})

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message and return the ``data`` of its answer; ``OpenEnvError`` for an error answer."""
        async with self._lock:
            if self.closed:
                raise OpenEnvUnreachable("the episode's connection to the OpenEnv server is closed")
            try:
                # The server may have answered and closed before our first message (OpenEnv refuses an episode
                # beyond its capacity that way): its answer is still to be read below.
                with contextlib.suppress(ConnectionClosed):
                    await self._connection.send(json.dumps(message))
                raw = await asyncio.wait_for(self._connection.recv(), timeout=self._timeout)
            except (ConnectionClosed, OSError) as exc:
                self.closed = True
                raise OpenEnvUnreachable(f"the OpenEnv server dropped the episode's connection: {exc}") from exc
            except TimeoutError as exc:
                raise OpenEnvUnreachable(f"the OpenEnv server did not answer within {self._timeout:g} s") from exc
        answer = json.loads(raw)
        data = answer.get("data") or {}
        if answer.get("type") == "error":
            raise OpenEnvError(str(data.get("message", "unknown error")), data.get("code"), data)
        return dict(data)

    async def close(self) -> None:
        """End the episode: OpenEnv's server then calls the environment's ``close()`` (once). Idempotent."""
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            with contextlib.suppress(ConnectionClosed, OSError):
                await self._connection.send(json.dumps({"type": "close"}))
            await self._connection.close()
