"""OpenEnv's protocol (OpenEnv 0.10), served under ``/openenv`` on every ngym server.

OpenEnv's clients (``GenericEnvClient``, ``MCPToolClient``, an environment's own ``EnvClient``) and
``openenv validate --url http://HOST:PORT/openenv`` talk to it as to an OpenEnv server at a root: ``/health``
(``{"status": "healthy"}``), ``/metadata``, ``/schema``, ``/reset``, ``/step``, ``/state``, ``/ws`` and ``/mcp``.
It is mounted under a path of its own because NeMo Gym's wire already answers ``GET /health`` at the root, with
``{"status": "ok"}``.

A thin front: an OpenEnv episode is one session of the server's own session manager, and every action runs the
environment's own route in process (as a NeMo Gym agent's HTTP call would):

- ``reset`` seeds a session with a dataset row (``/seed_session``): ``task_index`` (or ``seed``, modulo the rows)
  picks a row of the environment's ``data/example.jsonl``, ``row`` gives one, else the next row in turn;
- ``step`` with ``{"tool_name", "arguments"}`` (what ``CallToolAction`` and the generic client send) calls that
  tool's route; the observation carries its output;
- ``step`` with ``{"message": text}`` (or the ``final_answer`` tool) is the model's final answer: the episode
  ends, ``/verify`` scores the whole trajectory as a Responses object, exactly as NeMo Gym's agent would send it,
  and the step's ``reward`` is the verify reward: ``None`` when the result is masked (a lost session, a failed
  judge), never 0.0;
- closing the WebSocket (or the MCP session) closes the session.

This module is imported when an app is built; the front itself (``ngym.server.fronts.openenv.app``) on its first
request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ngym.server.fronts.lazy import LazyApp

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ngym.server.pipeline.resources import SimpleResourcesServer

MOUNT_PATH = "/openenv"


def mount(server: SimpleResourcesServer, app: FastAPI) -> LazyApp | None:
    """Mount OpenEnv's protocol under ``/openenv`` on a built app; it is built on its first request.

    Placed after the tool and standard routes (a request for them never tries it) but before any route with a
    path parameter, which could swallow ``/openenv/...``. An app that serves ``/openenv`` itself keeps it (None).
    """
    from starlette.routing import Mount

    routes = app.router.routes
    if any(getattr(route, "path", "") in (MOUNT_PATH, MOUNT_PATH + "/") for route in routes):
        return None

    def build() -> Any:
        # Imported here: pydantic models and WebSocket handling that NeMo-wire clients never need.
        from ngym.server.fronts.openenv.app import create_front_app

        return create_front_app(server, app)

    front = LazyApp(build)
    position = next((i for i, route in enumerate(routes) if "{" in (getattr(route, "path", "") or "")), len(routes))
    routes.insert(position, Mount(MOUNT_PATH, app=front))
    return front


__all__ = ["MOUNT_PATH", "mount"]
