"""Turn a server spec (class + config fields) into a running app: load, validate, build, serve with uvicorn.

``ngym run`` and ``SimpleServer.run_webserver()`` both end here. One server runs in this process; several
run as child processes (one per instance) supervised here; ``--workers N`` runs uvicorn's worker processes,
each building the app from the spec passed in ``NGYM_SERVE_SPEC``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngym.errors import ConfigError, PluginError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ngym.resources import SimpleResourcesServer

SPEC_ENV = "NGYM_SERVE_SPEC"
log = logging.getLogger("ngym.serve")


@dataclass
class ServeSpec:
    """What to serve: ``target`` is ``module:Class`` or a Python file (optionally ``file.py:Class``)."""

    target: str
    name: str
    fields: dict[str, Any] = field(default_factory=dict)
    #: False when the serve snapshot knows that no installed plugin implements ``ngym_extend_app``: the app
    #: is then built without loading the plugin system at all.
    app_plugins: bool = True

    def to_json(self) -> str:
        return json.dumps(asdict(self))

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
    from ngym.resources import SimpleResourcesServer

    class_name: str | None = None
    if target.endswith(".py") or (":" in target and target.split(":")[0].endswith(".py")):
        file_part, _, class_name = target.partition(":") if not target.endswith(".py") else (target, "", "")
        path = Path(file_part).resolve()
        if not path.is_file():
            raise ConfigError(f"entrypoint file not found: {path}")
        module_name, root = _module_name_for_file(path)
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
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
    from pydantic import ValidationError

    from ngym.domain import Domain

    cls = cls or load_server_class(spec.target)
    try:  # a class may declare its domain as a plain string ("agent"): parse it like the config's
        declared = Domain.parse(cls.domain) if cls.domain is not None else None
    except ValueError as exc:
        raise ConfigError(f"{spec.name}: {cls.__name__}: {exc}") from None
    config_cls = cls.config_class()
    fields = {**spec.fields, "name": spec.fields.get("name") or spec.name}
    if "domain" in fields and fields["domain"] is not None:
        try:
            fields["domain"] = Domain.parse(fields["domain"])
        except ValueError as exc:
            raise ConfigError(f"{spec.name}: {exc}") from None
    try:
        config = config_cls.model_validate(fields)
    except ValidationError as exc:
        lines = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise ConfigError(f"{spec.name}: invalid config: " + "; ".join(lines)) from None
    if declared is not None and config.domain is not None and declared != config.domain:
        raise ConfigError(
            f"{spec.name}: config says domain {config.domain.value!r} but {cls.__name__} declares {declared.value!r}"
        )
    if config.domain is None and declared is None:
        valid = ", ".join(d.value for d in Domain)
        raise ConfigError(f"{spec.name}: no domain: set 'domain:' in its config or on {cls.__name__} (one of {valid})")
    from ngym.plugins.rules import validate_server_class

    # The registration rules again (a real async verify, ...): the class may have changed since it was
    # registered, and ``ngym run`` of a broken class should say why, not serve 500s.
    validate_server_class(cls, name=spec.name, domain=config.domain, config_fields=fields)
    return cls(config=config)


def build_app(server: SimpleResourcesServer, *, app_plugins: bool = True) -> FastAPI:
    """The server's app with every plugin's ``ngym_extend_app`` applied and its routes in serving order.

    ``app_plugins=False`` skips the plugins (for callers that know none implements the hook).
    """
    app = server.setup_webserver()
    if app_plugins:
        from ngym.plugins.manager import get_plugin_manager

        get_plugin_manager().hook.ngym_extend_app(app=app, server=server)
    put_tool_routes_first(app)
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
        return 1 if getattr(route, "path", None) in standard else 0

    app.router.routes.sort(key=rank)  # stable: keeps each group's own order


def create_app(spec: ServeSpec, cls: type[SimpleResourcesServer] | None = None) -> FastAPI:
    """Build the FastAPI app of a spec (class loaded, config validated, plugins applied)."""
    return build_app(build_server(spec, cls), app_plugins=spec.app_plugins)


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes: the spec comes from ``NGYM_SERVE_SPEC``."""
    return create_app(ServeSpec.from_json(os.environ[SPEC_ENV]))


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(True)
    return sock


def _listen_line(spec: ServeSpec, host: str, port: int, domain: str | None, workers: int) -> str:
    """Where the server really listens; on every interface, also the local URL to open."""
    extra = f", {workers} workers" if workers > 1 else ""
    every = host in ("0.0.0.0", "", "::")
    bound = f"[{host or '::'}]" if ":" in host else (host or "0.0.0.0")
    local = f" (all interfaces; locally http://127.0.0.1:{port})" if every else ""
    return f"ngym: serving {spec.name} ({domain or '?'}{extra}) at http://{bound}:{port}{local}  (docs: /docs)"


def check_workers(server: SimpleResourcesServer, workers: int) -> None:
    """Refuse several workers where they would not share sessions."""
    if workers <= 1:
        return
    assert server._sessions is not None
    store = server._sessions.store
    if not store.shared_between_processes:
        raise ConfigError(
            f"{server.config.name}: --workers {workers} needs a session store the workers share: the memory store "
            "is per process, so a rollout's requests would reach workers that do not hold its session. Set "
            "NGYM_SESSION_STORE=redis://HOST:6379/0 (pip install ./plugins/ngym_redis) or run one worker."
        )
    if type(server).session_affinity_required:
        raise ConfigError(
            f"{server.config.name}: {type(server).__name__} keeps live per-session state (session affinity "
            "required); run one worker per replica and route each session to one replica."
        )


def _graceful_server(config: Any) -> Any:
    """A uvicorn server that exits 0 after a graceful SIGINT/SIGTERM shutdown.

    uvicorn re-raises the signal once it has shut down (exit status -15 or 130), which supervisors read as
    a crash; ngym has already closed every session by then, so a clean stop is reported as one.
    """
    import uvicorn

    class GracefulServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()

    return GracefulServer(config)


def share_secret_between_workers(spec: ServeSpec, workers: int) -> None:
    """The workers of one ``ngym run`` must accept each other's cookies: with no configured secret, make one
    for all of them (through the environment the workers inherit). Replicas must still be given one."""
    from ngym.sessions.cookies import SESSION_SECRET_ENV

    if workers <= 1 or spec.fields.get("session_secret") or os.environ.get(SESSION_SECRET_ENV):
        return
    import secrets

    os.environ[SESSION_SECRET_ENV] = secrets.token_urlsafe(32)
    log.info(
        "no session secret configured: made one shared by the %d workers of this process; replicas on other "
        "processes or machines need the same %s",
        workers,
        SESSION_SECRET_ENV,
    )


def serve_one(spec: ServeSpec, workers: int = 1, access_log: bool = False) -> None:
    """Serve one spec in this process (uvicorn workers when ``workers`` > 1) until SIGINT/SIGTERM."""
    import uvicorn

    server = build_server(spec)
    app = build_app(server, app_plugins=spec.app_plugins)
    check_workers(server, workers)
    share_secret_between_workers(spec, workers)  # after the checks: no "made a shared secret" before a refusal
    host, port = server.config.host, server.config.port
    sock = _bind(host, port)
    port = sock.getsockname()[1]
    domain = server.resolved_domain()
    print(_listen_line(spec, host, port, domain.value if domain else None, workers), flush=True)
    if workers > 1:
        os.environ[SPEC_ENV] = spec.to_json()
        config = uvicorn.Config(
            "ngym.serve:app_from_env", factory=True, workers=workers, log_level="warning", access_log=access_log
        )
        from uvicorn.supervisors import Multiprocess

        if "target" in inspect.signature(Multiprocess).parameters:  # uvicorn before 0.30
            Multiprocess(config, target=_graceful_server(config).run, sockets=[sock]).run()  # type: ignore[call-arg]
        else:  # newer uvicorn builds each worker's server from the config itself
            Multiprocess(config, sockets=[sock]).run()
        return
    config = uvicorn.Config(app, log_level="warning", access_log=access_log, lifespan="on")
    _graceful_server(config).run(sockets=[sock])


def serve_many(specs: list[ServeSpec], workers: int = 1, access_log: bool = False) -> int:
    """Serve several specs, one child process each; stop them all on SIGINT/SIGTERM or when one dies."""
    children: list[subprocess.Popen[bytes]] = []
    for spec in specs:
        cmd = [sys.executable, "-m", "ngym.serve", spec.to_json(), str(workers), "1" if access_log else "0"]
        children.append(subprocess.Popen(cmd))

    def stop(_signum: int, _frame: Any) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    import time

    code = 0
    while any(child.poll() is None for child in children):
        for child in children:
            if child.poll() not in (None, 0) and code == 0:
                code = child.returncode or 1
                stop(signal.SIGTERM, None)
        time.sleep(0.1)
    return code


def run_server_class(cls: type[SimpleResourcesServer], overrides: dict[str, Any]) -> None:
    """``MyServer.run_webserver()``: config from ``key=value`` / ``+config_paths=[...]`` arguments."""
    from ngym.cli.errors import run_guarded
    from ngym.config import apply_overrides, instances_from_files, split_overrides
    from ngym.resources import default_instance_name

    def main() -> None:
        paths, dotted = split_overrides(sys.argv[1:])
        target = (
            f"{inspect.getfile(cls)}:{cls.__name__}"
            if cls.__module__ == "__main__"
            else (f"{cls.__module__}:{cls.__qualname__}")
        )
        if paths:
            instances = instances_from_files(paths, dotted)
            chosen = next((i for i in instances if i.server_type == "resources_servers"), None)
            if chosen is None:
                raise ConfigError("no resources_servers instance in the given config")
            fields, name = chosen.fields, chosen.name
        else:
            fields, name = apply_overrides({}, dotted), default_instance_name(cls)
        fields = {**fields, **overrides}
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        workers = int(fields.get("num_workers") or 1)
        serve_one(ServeSpec(target=target, name=name, fields=fields), workers=workers)

    run_guarded(main)


if __name__ == "__main__":  # a child of serve_many
    from ngym.cli.errors import run_guarded

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run_guarded(lambda: serve_one(ServeSpec.from_json(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"))
