"""From a serve spec (class target + config fields) to a FastAPI app: load the class, validate its config, build.

``ngym run``, ``SimpleServer.run_webserver()``, ``ngym validate`` and ``ngym.testing`` all build apps here;
``ngym.server.hosting.host`` serves them with uvicorn.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from ngym.errors import ConfigError, PluginError
from ngym.plugins import manager as plugin_manager
from ngym.server.pipeline.extensions import apply_app_extensions
from ngym.server.pipeline.middleware import raise_server_exceptions
from ngym.server.pipeline.resources import SimpleResourcesServer
from ngym.server.pipeline.rules import validate_server_class

SPEC_ENV = "NGYM_SERVE_SPEC"


@dataclass
class ServeSpec:
    """What to serve: ``target`` is ``module:Class`` or a Python file (optionally ``file.py:Class``)."""

    target: str
    name: str
    fields: dict[str, Any] = field(default_factory=dict)
    #: False when no hook plugin is installed (``ngym.targets``), so none can implement ``ngym_extend_app``:
    #: the app is then built without loading the plugin system at all.
    app_plugins: bool = True
    #: the class, when whoever made the spec imported it already (``ngym run`` checking an override): serving
    #: in this process uses it instead of importing it again from ``target``; not in the JSON (a child
    #: process imports it)
    server_class: type[SimpleResourcesServer] | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> str:
        data = asdict(self)
        del data["server_class"]
        return json.dumps(data)

    def load_class(self) -> type[SimpleResourcesServer]:
        """The server class: the one already imported, else imported from ``target``."""
        return self.server_class or load_server_class(self.target)

    @classmethod
    def from_json(cls, text: str) -> ServeSpec:
        return cls(**json.loads(text))


def _module_name_for_file(path: Path) -> tuple[str, Path]:
    """Dotted module name of a file and the folder to put on sys.path (walks up through packages)."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


def load_server_class(target: str) -> type[SimpleResourcesServer]:
    """Import the resources-server class a target names; a file's module must define exactly one."""
    class_name: str | None = None
    if target.endswith(".py") or (":" in target and target.split(":")[0].endswith(".py")):
        file_part, _, class_name = target.partition(":") if not target.endswith(".py") else (target, "", "")
        path = Path(file_part).resolve()
        if not path.is_file():
            raise ConfigError(f"entrypoint file not found: {path}")
        module_name, root = _module_name_for_file(path)
        # NeMo Gym runs app.py as a script from a checkout it is installed from (editable): the file's folder
        # and the folder holding resources_servers/ are importable (`from utils import ...`,
        # `from resources_servers.<name>.app import ...`)
        repository = [path.parent.parent.parent] if path.parent.parent.name == "resources_servers" else []
        for folder in reversed([root, path.parent, *repository]):
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
    else:
        module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise PluginError(f"cannot import {module_name} (from {target}): {exc!r}") from exc
    if class_name:
        cls = getattr(module, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, SimpleResourcesServer)):
            raise PluginError(f"{target}: {class_name} is not a SimpleResourcesServer subclass")
        return cls
    found = [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, SimpleResourcesServer) and obj.__module__ == module.__name__
    ]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in found) or "none"
        raise PluginError(
            f"{target}: expected one SimpleResourcesServer subclass in the module, found {names}; "
            "name it as file.py:ClassName"
        )
    return found[0]


def build_server(spec: ServeSpec, cls: type[SimpleResourcesServer] | None = None) -> SimpleResourcesServer:
    """Instantiate the server with its validated config (errors become one readable ConfigError)."""
    cls = cls or spec.load_class()
    fields = {**spec.fields, "name": spec.fields.get("name") or spec.name}
    # The registration rules (the one domain decision, the config, a real async verify) on the class about to
    # be served: it may have changed since it was registered.
    domain, config_cls = validate_server_class(cls, name=spec.name, config_fields=fields, config_error=ConfigError)
    return cls(config=config_cls.model_validate({**fields, "domain": domain}))


def build_app(server: SimpleResourcesServer, *, app_plugins: bool = True) -> FastAPI:
    """The server's app with every plugin's ``ngym_extend_app`` applied, its routes in serving order, and the
    registered app extensions (``ngym.server.pipeline.extensions``) applied.

    ``app_plugins=False`` skips the plugins (for callers that know none implements the hook).
    """
    app = server.setup_webserver()
    # A served app answers an exception as HTTP 500 with repr(exc), whatever its bare app does (NeMo Gym's
    # run_webserver adds its exception middleware at this point too).
    raise_server_exceptions(app, False)
    if app_plugins:
        plugin_manager.get_plugin_manager().hook.ngym_extend_app(app=app, server=server)
    put_tool_routes_first(app)
    # What hosting and the protocol fronts add, as registered with the pipeline (ngym.server registers the
    # built-in ones: the ORS front, the environment loop, MCP exposure when asked for, OpenEnv's front).
    apply_app_extensions(server, app)
    return app


def put_tool_routes_first(app: FastAPI) -> None:
    """Order routes by how often a rollout hits them: tools, then seed/verify/close, then the GET routes.

    Starlette tries routes one by one; an environment adds its tools after the standard routes, so without
    this every tool call (several per rollout) would first be matched against every standard route.
    """
    standard = {"/seed_session", "/verify", "/close_session", "/aggregate_metrics"}

    def rank(route: Any) -> int:
        if "POST" not in (getattr(route, "methods", None) or ()):
            return 2
        path = getattr(route, "path", None) or ""
        # a route with a path parameter (`POST /{name}`: a catch-all tool router) stays behind the standard
        # routes it would otherwise swallow
        return 1 if path in standard or "{" in path else 0

    app.router.routes.sort(key=rank)  # stable: keeps each group's own order


#: A target module may name the directory its server runs in (the serving process changes into it first).
#: ``ngym install``'s shim for a NeMo Gym environment sets it to the environment's folder: NeMo Gym starts each
#: server from inside its folder, and their configs name files relative to it (``prompt_templates/x.txt``).
WORKING_DIRECTORY_ATTRIBUTE = "NGYM_WORKING_DIRECTORY"


def working_directory(target: str) -> str | None:
    """The directory the target's module (a ``module:Class`` target; imported here if need be) asks its server
    to run in, if any. A module that fails to import has none: loading the class reports that failure."""
    module_name = target.partition(":")[0]
    if module_name.endswith(".py") or "/" in module_name:
        return None
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
    except Exception:
        return None
    directory = getattr(module, WORKING_DIRECTORY_ATTRIBUTE, None)
    return str(directory) if directory else None


@contextmanager
def in_working_directory(target: str) -> Iterator[None]:
    """Run the block inside the target's working directory (``working_directory``), then return to where this
    process was: for in-process serving (``ngym validate``, ``ngym.testing``), which must not move its caller."""
    directory = working_directory(target)
    if directory is None:
        yield
        return
    previous = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(previous)


def create_app(spec: ServeSpec, cls: type[SimpleResourcesServer] | None = None) -> FastAPI:
    """Build the FastAPI app of a spec (class loaded, config validated, plugins applied)."""
    return build_app(build_server(spec, cls), app_plugins=spec.app_plugins)
