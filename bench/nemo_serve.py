"""Serve one NeMo Gym 0.7.0 environment with NeMo Gym itself, for the side-by-side heavy benchmark.

Run with the interpreter of a NeMo Gym virtualenv (it imports only the standard library, uvicorn, the environment
and ``nemo_gym``). The server is built as ``tools/nemo_replay_inprocess.py`` builds it (NeMo's config class from
the YAML, NeMo's own ``ServerClient`` for judges), then its own FastAPI app (``setup_webserver``) is served by
uvicorn with one worker, the way NeMo's ``run_webserver`` serves a resources server by default.

    python bench/nemo_serve.py MODULE:CLASS INSTANCE CONFIG_YAML PORT [MODEL_URLS_JSON [OVERRIDES_JSON]]

OVERRIDES_JSON: a list of ``key=value`` merged over the config before it is resolved (the ``policy_*`` values a
config's ``${policy_base_url}`` reads, which NeMo Gym users give in env.yaml), as ``tools/nemo_replay_inprocess.py``.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from unittest.mock import MagicMock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools.nemo_replay_inprocess


def main(
    target: str, instance: str, config_path: str, port: str, urls_json: str = "{}", overrides_json: str = "[]"
) -> None:
    import uvicorn
    from nemo_gym.server_utils import ServerClient

    from tools.nemo_replay_inprocess import resolved_fields, server_client

    module_name, _, class_name = target.partition(":")
    server_class = getattr(importlib.import_module(module_name), class_name)
    config_class = server_class.model_fields["config"].annotation
    fields = {"host": "127.0.0.1", "port": int(port), "entrypoint": "app.py", "name": instance}
    fields.update(resolved_fields(config_path, instance, json.loads(overrides_json)))
    config = config_class.model_validate(fields)
    urls = json.loads(urls_json)
    server = server_class(config=config, server_client=server_client(urls) if urls else MagicMock(spec=ServerClient))
    uvicorn.run(server.setup_webserver(), host="127.0.0.1", port=int(port), log_level="warning", access_log=False)


if __name__ == "__main__":
    arguments = sys.argv[1:7]
    del sys.argv[1:]  # NeMo Gym's global config parses the command line as Hydra overrides
    main(*arguments)
