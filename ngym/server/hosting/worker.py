"""The app of one worker process (``ngym run --workers N``): uvicorn's factory, the spec read from the environment."""

from __future__ import annotations

import os

from fastapi import FastAPI

from ngym.server.hosting.cpu_priority import apply_cpu_priorities
from ngym.server.hosting.fork_template import prepare_fork_template
from ngym.server.pipeline.app import SPEC_ENV, ServeSpec, build_app, build_server
from ngym.server.pipeline.traffic import TRAFFIC_FILE_ENV
from ngym.server.sessions.cookies import withhold_secret_from_children


def app_from_env() -> FastAPI:
    """uvicorn factory for worker processes: the spec comes from ``NGYM_SERVE_SPEC``."""
    apply_cpu_priorities()  # before the environment is built: the threads and processes it starts are covered
    spec = ServeSpec.from_json(os.environ[SPEC_ENV])
    server = build_server(spec)
    app = build_app(server, app_plugins=spec.app_plugins)
    withhold_secret_from_children()  # the app has its secret: what the environment starts never inherits it
    os.environ.pop(TRAFFIC_FILE_ENV, None)  # read by this worker's counters; not for the processes it starts
    server.before_serving()
    prepare_fork_template()  # each worker is a template for the children its environment forks
    return app
