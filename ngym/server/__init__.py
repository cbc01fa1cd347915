"""The server runtime: what runs inside a served environment.

- ``pipeline/``: the request pipeline of one resources server (app building, the base classes an author
  subclasses, middleware, body intake, the standard routes, registration rules).
- ``sessions/``: per-rollout sessions (cookies, stores, the manager that binds requests to them).
- ``protocol/``: the wire models (OpenAI Responses types, route bodies, failure kinds).
- ``hosting/``: serving an app in processes (uvicorn, workers behind HAProxy, the environment loop, the fork
  template, CPU priority).
- ``fronts/``: other protocols served beside the pipeline (MCP; ORS and OpenEnv's).

Nothing here imports the CLI or the tooling (validate, containerize, profile, rollout). The pipeline imports
neither hosting nor the fronts: they plug into it through ``pipeline.extensions``, registered below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ngym.server.pipeline.extensions import register_app_extension

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ngym.server.pipeline.resources import SimpleResourcesServer


# The built-in app extensions, in the order ``build_app`` applies them. Each imports its module when an app is
# built, not when the runtime is imported: MCP (httpx, the mcp SDK) only for a server whose config asks for it.


def _mount_ors(server: SimpleResourcesServer, app: FastAPI) -> None:
    from ngym.server.fronts.ors.mount import mount_ors

    mount_ors(server, app)


def _environment_loop(server: SimpleResourcesServer, app: FastAPI) -> None:
    """The author's coroutines on a loop of their own, when the server wants one."""
    from ngym.server.hosting.env_loop import serve_on_environment_loop

    serve_on_environment_loop(app, server)


def _expose_tools_over_mcp(server: SimpleResourcesServer, app: FastAPI) -> None:
    """After the plugins (``build_app`` applies extensions last): their tool routes are exposed too."""
    if server.config.expose_tools_over_mcp:
        from ngym.server.fronts import mcp

        mcp.install(server, app)


def _mount_openenv(server: SimpleResourcesServer, app: FastAPI) -> None:
    """Mounted now, built on its first request (its routes come after the tool and standard routes)."""
    from ngym.server.fronts import openenv

    openenv.mount(server, app)


register_app_extension("ors", _mount_ors)
register_app_extension("environment loop", _environment_loop)
register_app_extension("mcp", _expose_tools_over_mcp)
register_app_extension("openenv", _mount_openenv)
