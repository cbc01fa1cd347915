"""``openreward.environments.Server`` (the SDK's reference server) serving one environment, as ``orwd init``'s
``server.py`` runs it: ``python reference_server.py FOLDER MODULE CLASS PORT`` (an interpreter with openreward)."""

from __future__ import annotations

import importlib
import sys


def main(folder: str, module: str, environment: str, port: int) -> None:
    import uvicorn
    from openreward.environments import Server

    sys.path.insert(0, folder)
    cls = getattr(importlib.import_module(module), environment)
    uvicorn.run(Server([cls]).app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
