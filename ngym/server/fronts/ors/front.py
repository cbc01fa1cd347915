"""Build one server's ORS front: its name, splits, tools and episode table over its own app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ngym.server.fronts.gymnasium import is_gymnasium_app
from ngym.server.fronts.ors import tasks
from ngym.server.fronts.ors.episodes import Episodes
from ngym.server.fronts.ors.routes import ORSFront
from ngym.server.fronts.ors.tools import Toolbox

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ngym.server.pipeline.resources import SimpleResourcesServer


def build_front(server: SimpleResourcesServer, app: FastAPI) -> ORSFront:
    """The ORS front of ``server`` whose routes run in ``app`` (the whole served app, middleware included)."""
    name = server.config.name or type(server).__name__
    toolbox = Toolbox(app, gymnasium=is_gymnasium_app(app))
    front = ORSFront(name, tasks.discover_splits(server), toolbox, Episodes(server, app, toolbox))
    server_fronts = getattr(app.state, "ngym_fronts", None)
    if server_fronts is None:
        server_fronts = {}
        app.state.ngym_fronts = server_fronts
    server_fronts["ors"] = front
    return front
