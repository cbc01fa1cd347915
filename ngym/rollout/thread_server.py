"""Serve an ASGI app (the replay model, a scripted judge) on a free local port in a background thread; stop it
after. (An installed environment is started as a child process by ``ngym.child_server.serve_environment``.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from ngym.rollout.errors import RolloutError


@contextmanager
def serve_app_in_thread(app: Any, host: str = "127.0.0.1", timeout: float = 30.0) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free port in a daemon thread; yields ``http://host:port``."""

    config = uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="ngym-local-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RolloutError("a local server (replay model / judge) did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
