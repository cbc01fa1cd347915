"""The fleet's head server: NeMo Gym's head-server routes over the fleet's global config.

NeMo Gym's ``ServerClient.load_from_global_config`` GETs ``/global_config_dict_yaml`` from the head server
named in its own (CLI) config and parses the body as JSON holding the YAML text; ``/server_instances`` lists the
running servers. Secrets are masked in what it serves (:func:`ngym.redact.redact`: keys, tokens, passwords,
values of secret environment variables): the servers the fleet starts read the whole config from their
environment, and anyone who can reach the head server's port can read what it serves.

Run as ``python -m ngym.fleet.head CONFIG.yaml INSTANCES.json HOST PORT``; it rereads the files on each request,
so ``up`` can add servers after it started.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from ngym.fleet.global_config import dump
from ngym.redact import redact


def create_head_app(config_path: Path, instances_path: Path) -> FastAPI:
    """The head server's app over the files ``up`` writes."""
    app = FastAPI(title="ngym fleet head server")

    @app.get("/")
    @app.get("/health")
    @app.get("/healthz")
    @app.get("/livez")
    @app.get("/readyz")
    async def health() -> Any:
        if not config_path.is_file():  # `up` has not written the config yet: starting, like NeMo's 503
            return JSONResponse({"status": "starting"}, status_code=503)
        return {"status": "ok"}

    @app.get("/global_config_dict_yaml")
    async def global_config_dict_yaml() -> Any:
        if not config_path.is_file():
            return JSONResponse({"detail": "the fleet is still starting: no global config yet"}, status_code=503)
        return dump(redact(yaml.safe_load(config_path.read_text()) or {}))

    @app.get("/server_instances")
    async def server_instances() -> Any:
        return json.loads(instances_path.read_text()) if instances_path.is_file() else []

    return app


def main(argv: list[str]) -> None:
    import uvicorn

    config_path, instances_path, host, port = Path(argv[0]), Path(argv[1]), argv[2], int(argv[3])
    uvicorn.run(create_head_app(config_path, instances_path), host=host, port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
