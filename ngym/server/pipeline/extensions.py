"""Where hosting and the protocol fronts plug into an app: the pipeline calls them without naming them.

The pipeline builds an app (``ngym.server.pipeline.app.build_app``) and calls an environment's methods. What
serves the app in processes (``ngym.server.hosting``) and the other protocols served beside it
(``ngym.server.fronts``) are built on the pipeline, so they register here and the pipeline imports none of them:

- an *app extension* ``(server, app) -> None`` is applied to every served app by ``build_app``, in the order
  registered, after the plugins' ``ngym_extend_app`` and the route ordering. ``ngym.server`` registers the built-in
  ones when the runtime is imported: the ORS front's mount, the environment loop, MCP exposure (when the config
  asks for it), OpenEnv's mount.
- a *placement* is how an app runs the author's coroutines (its start-up and shutdown hooks): an extension that
  moves them elsewhere (the environment loop) sets one on the app (``set_placement``); the pipeline asks
  ``placed_for`` and gets the function unchanged when none is set.

An extension registered again under the same name replaces the earlier one (in its place).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ngym.server.pipeline.resources import SimpleResourcesServer

T = TypeVar("T")

AppExtension = Callable[["SimpleResourcesServer", "FastAPI"], object]
Placement = Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]

_EXTENSIONS: dict[str, AppExtension] = {}

#: ``app.state`` attribute holding the app's placement (``set_placement``).
PLACEMENT_STATE = "ngym_placement"


def register_app_extension(name: str, extension: AppExtension) -> None:
    """Apply ``extension(server, app)`` to every app ``build_app`` builds from now on, after those already
    registered (a name registered before keeps its place and gets the new function)."""
    _EXTENSIONS[name] = extension


def unregister_app_extension(name: str) -> AppExtension | None:
    """Remove the extension registered under ``name``; the removed function, or None when there was none."""
    return _EXTENSIONS.pop(name, None)


def app_extensions() -> list[tuple[str, AppExtension]]:
    """The registered extensions, in the order ``build_app`` applies them."""
    return list(_EXTENSIONS.items())


def apply_app_extensions(server: SimpleResourcesServer, app: FastAPI) -> None:
    """Apply every registered extension to ``app``, in order."""
    for extension in list(_EXTENSIONS.values()):
        extension(server, app)


def set_placement(app: Any, placement: Placement) -> None:
    """Run the author's coroutines of ``app`` through ``placement`` (see ``placed_for``)."""
    setattr(app.state, PLACEMENT_STATE, placement)


def placed_for(app: Any, function: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """``function`` as ``app`` runs the author's coroutines: through its placement when one is set, else as it is."""
    placement: Placement | None = getattr(app.state, PLACEMENT_STATE, None)
    return function if placement is None else placement(function)
