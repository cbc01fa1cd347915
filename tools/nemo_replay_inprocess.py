"""Replay an environment's recorded example rollouts in-process against NeMo Gym 0.7.0 itself.

Run by ``tools/nemo_envs.py`` with the interpreter of a NeMo Gym virtualenv (it imports only the standard
library, the environment and ``nemo_gym``): builds the server the way NeMo's ``run_webserver`` does (its
config class from the YAML fields, a ``ServerClient`` stand-in that fails every call), then drives its real
FastAPI app through ``/seed_session`` and ``/verify`` for each row, one session (cookie jar) per row.

    python nemo_replay_inprocess.py MODULE:CLASS INSTANCE_NAME FIELDS_JSON ROWS_JSONL OUT_JSON
"""

from __future__ import annotations

import importlib
import json
import sys
from unittest.mock import MagicMock


def replay_bodies(row: dict) -> tuple[dict, dict]:
    """(seed body, verify body) of a recorded rollout row: the row without its recorded reward, and without the
    nulls its ``responses_create_params`` was dumped with (NeMo sends them ``exclude_none``; its strict model
    rejects ``parallel_tool_calls: null``)."""
    body = {k: v for k, v in row.items() if k != "reward"}
    params = body.get("responses_create_params")
    if isinstance(params, dict):
        body["responses_create_params"] = {k: v for k, v in params.items() if v is not None}
    return {k: v for k, v in body.items() if k != "response"}, body


def main(target: str, instance: str, fields_json: str, rows_path: str, out_path: str) -> None:
    from fastapi.testclient import TestClient
    from nemo_gym.server_utils import ServerClient

    module_name, _, class_name = target.partition(":")
    server_class = getattr(importlib.import_module(module_name), class_name)
    config_class = server_class.model_fields["config"].annotation
    fields = {"host": "127.0.0.1", "port": 0, "entrypoint": "app.py", "name": instance, **json.loads(fields_json)}
    config = config_class.model_validate(fields)
    server = server_class(config=config, server_client=MagicMock(spec=ServerClient))
    app = server.setup_webserver()
    rewards: list[float | None] = []
    errors: list[str | None] = []
    with open(rows_path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    for row in rows:
        seed, body = replay_bodies(row)
        with TestClient(app, raise_server_exceptions=False) as client:
            client.post("/seed_session", json=seed)
            response = client.post("/verify", json=body)
        if response.status_code == 200 and isinstance(response.json().get("reward"), int | float):
            rewards.append(float(response.json()["reward"]))
            errors.append(response.json().get("_ng_failure_judge_error"))
        else:
            rewards.append(None)
            errors.append(f"HTTP {response.status_code}: {response.text[:300]}")
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump({"rewards": rewards, "errors": errors}, handle)


if __name__ == "__main__":
    main(*sys.argv[1:6])
