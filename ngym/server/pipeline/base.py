"""``BaseServer`` and ``SimpleServer``: a server is a pydantic model holding its config, that builds a FastAPI app.

As in NeMo Gym, a server class is a pydantic ``BaseModel``: its ``config`` field's annotation names its
config class, and subclasses may declare their own fields (``session_id_to_counter: dict = Field(...)``).
``SimpleServer.run_webserver()`` serves the class when its module is run as a script.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from abc import abstractmethod
from typing import Any, ClassVar

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ngym.domain import Domain
from ngym.server.pipeline.request_limits import (
    DEFAULT_BODY_TIMEOUT_SECONDS,
    DEFAULT_HEADER_TIMEOUT_SECONDS,
    DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_HEADER_BYTES,
)

#: ``run_webserver``'s keyword overrides (JSON) travel to ``ngym.server.hosting.host`` in this variable, never on its
#: command line: they may hold session_secret, and any process on the host can read every command line in /proc.
CLASS_OVERRIDES_ENV = "NGYM_CLASS_OVERRIDES"


class BaseServerConfig(BaseModel):
    """Fields every server instance has. Unknown keys from the YAML (``datasets``, ...) are kept."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(default="", description="Instance name, unique at run time (the YAML's top-level key).")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    num_workers: int | None = Field(default=None, ge=1)
    entrypoint: str | None = None
    domain: Domain | None = None
    # HTTP limits (docs/protocol.md, "Limits"): what one client may cost the server.
    max_request_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES, ge=1024, description="Larger request bodies get 413, before parsing."
    )
    request_body_timeout_seconds: float = Field(
        default=DEFAULT_BODY_TIMEOUT_SECONDS,
        gt=0,
        description="A body not complete this long after its request started: 408.",
    )
    request_header_timeout_seconds: float = Field(
        default=DEFAULT_HEADER_TIMEOUT_SECONDS,
        gt=0,
        description="Close a connection whose request headers are not complete this long after it opened or went idle.",
    )
    max_request_header_bytes: int = Field(
        default=DEFAULT_MAX_HEADER_BYTES, ge=1024, description="Request line + headers larger than this: 431."
    )
    keep_alive_timeout_seconds: float = Field(
        default=DEFAULT_KEEP_ALIVE_TIMEOUT_SECONDS,
        gt=0,
        description="Idle keep-alive connections are closed after this.",
    )
    websocket_compression: bool = Field(
        default=False,
        description=(
            "Accept permessage-deflate on WebSockets (OpenEnv's /openenv/ws). Off: messages travel uncompressed, "
            "as NeMo Gym's HTTP bodies do, and cost no compression CPU (a dataset row is kilobytes per reset)."
        ),
    )


class BaseServer(BaseModel):
    """A server: its config plus whatever fields a subclass declares."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    config: BaseServerConfig

    @classmethod
    def config_class(cls) -> type[BaseServerConfig]:
        """The config class this server declares through its ``config`` annotation."""
        annotation = cls.model_fields["config"].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseServerConfig):
            return annotation
        raise TypeError(f"{cls.__name__}.config must be annotated with a BaseServerConfig subclass")


class SimpleServer(BaseServer):
    """A server that builds one FastAPI app."""

    #: Shown by ``ngym list`` and ``/health``; defaults to the class docstring's first line.
    description: ClassVar[str | None] = None

    @abstractmethod
    def setup_webserver(self) -> FastAPI:
        """Build and return the FastAPI app."""

    def before_serving(self) -> None:
        """Called once per serving process (``ngym run``, each worker), after the server and its app are built
        and before the process accepts connections; not when an app is only built (a test's TestClient).

        For slow, blocking set-up the server would otherwise do on its event loop at its first request (start a
        local Ray, load a model): done here, no rollout waits behind it. The default does nothing.
        """

    @classmethod
    def run_webserver(cls, **overrides: Any) -> None:
        """Serve this class (``if __name__ == "__main__": MyServer.run_webserver()``).

        Config comes from ``key=value`` arguments on the command line (``port=9000``, ``+config_paths=[a.yaml]``)
        and keyword overrides; see ``ngym run --help``.

        This process becomes ``python -m ngym.server.hosting.host --class FILE:CLASS`` (``exec``: the same process id,
        so supervisors and signals see one process), which imports the class's file as a module, as
        ``ngym run app.py`` does. (The host builds servers from these classes, so it cannot be imported here.)
        The keyword overrides go in ``NGYM_CLASS_OVERRIDES``, not on that command line.
        """
        script = cls.__module__ == "__main__"
        target = f"{inspect.getfile(cls)}:{cls.__name__}" if script else f"{cls.__module__}:{cls.__qualname__}"
        os.environ[CLASS_OVERRIDES_ENV] = json.dumps(overrides)
        sys.stdout.flush()
        sys.stderr.flush()
        # a script's class is imported by its path, so the current folder need not be on sys.path (-P: a checkout
        # named ngym/ there would be imported instead of ngym); a module's ``module:Class`` may be importable only
        # from the folder the user ran it in, as it was before the exec: no -P then
        safe = ["-P"] if script else []
        host = [sys.executable, *safe, "-m", "ngym.server.hosting.host", "--class", target, *sys.argv[1:]]
        os.execv(sys.executable, host)


def secret_value(secret: SecretStr | str | None) -> str | None:
    if secret is None:
        return None
    return secret.get_secret_value() if isinstance(secret, SecretStr) else secret
