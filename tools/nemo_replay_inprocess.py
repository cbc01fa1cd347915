"""Replay an environment's recorded example rollouts in-process against NeMo Gym 0.7.0 itself.

Run by ``tools/nemo_envs.py`` with the interpreter of a NeMo Gym virtualenv (it imports only the standard
library, the environment and ``nemo_gym``): builds the server the way NeMo's ``run_webserver`` does (its
config class from the YAML fields, NeMo's own ``ServerClient`` whose global config places each named model
server at the URL given, or a stand-in that fails every call when none is), then drives its real FastAPI
app through ``/seed_session`` and ``/verify`` for each row, one session (cookie jar) per row.

    python nemo_replay_inprocess.py MODULE:CLASS INSTANCE_NAME FIELDS_JSON PAYLOADS_JSONL OUT_JSON [MODEL_URLS_JSON]
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from unittest.mock import MagicMock


def verify_payloads(inputs: list[dict], rollouts: list[dict]) -> list[dict]:
    """The ``/verify`` bodies NeMo Gym's ``gym eval reverify`` would send: each rollout's ``response`` on the
    dataset row it was collected from (``data/example.jsonl``, matched by the prompt's input, else by position).
    A rollout row alone is a verify *response* (reward, judge evaluations, ...): sending it back would feed
    outputs in as inputs. Nulls in ``responses_create_params`` are dropped (NeMo dumps rows ``exclude_none``;
    its strict model rejects ``parallel_tool_calls: null``)."""

    def key(row: dict) -> str:
        return json.dumps((row.get("responses_create_params") or {}).get("input"), sort_keys=True)

    by_input: dict[str, dict] = {}
    for row in inputs:
        by_input.setdefault(key(row), row)
    payloads = []
    for index, rollout in enumerate(rollouts):
        source = by_input.get(key(rollout))
        if source is None and len(inputs) == len(rollouts):
            source = inputs[index]
        if source is None:  # no dataset row: the rollout without what verify added to it
            source = {k: v for k, v in rollout.items() if k not in ("reward", "response")}
        payload = {**source, "response": rollout.get("response")}
        params = payload.get("responses_create_params")
        if isinstance(params, dict):
            payload["responses_create_params"] = {k: v for k, v in params.items() if v is not None}
        payloads.append(payload)
    return payloads


def replay_row(client, row: dict) -> tuple[float | None, str | None]:
    """Seed and verify one payload (``verify_payloads``) through ``client`` (FastAPI's TestClient or an
    httpx.Client: the same calls); (reward, failure). A Gymnasium-style server (no ``/verify``: NeMo's
    ``GymnasiumServer``) is replayed as ``/reset`` then the recorded response as one ``/step``."""
    body = row
    seed = {k: v for k, v in body.items() if k != "response"}
    client.post("/seed_session", json=seed)
    response = client.post("/verify", json=body)
    if response.status_code == 404:
        client.post("/reset", json=seed)
        response = client.post("/step", json=body)
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code == 200 and isinstance(data, dict) and isinstance(data.get("reward"), int | float):
        return float(data["reward"]), data.get("_ng_failure_judge_error")
    return None, f"HTTP {response.status_code}: {response.text[:300]}"


def server_client(model_urls: dict[str, str]):
    """NeMo's ``ServerClient`` with each model server name at its URL (``http://host:port``)."""
    from urllib.parse import urlparse

    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    tree = {}
    for name, url in model_urls.items():
        parsed = urlparse(url)
        tree[name] = {"responses_api_models": {"scripted": {"host": parsed.hostname, "port": parsed.port}}}
    head = BaseServerConfig(host="127.0.0.1", port=1)
    return ServerClient(head_server_config=head, global_config_dict=OmegaConf.create(tree))


def main(target: str, instance: str, fields_json: str, rows_path: str, out_path: str, urls_json: str = "{}") -> None:
    from fastapi.testclient import TestClient
    from nemo_gym.server_utils import ServerClient

    module_name, _, class_name = target.partition(":")
    server_class = getattr(importlib.import_module(module_name), class_name)
    config_class = server_class.model_fields["config"].annotation
    fields = {"host": "127.0.0.1", "port": 0, "entrypoint": "app.py", "name": instance, **json.loads(fields_json)}
    config = config_class.model_validate(fields)
    model_urls = json.loads(urls_json)
    servers = server_client(model_urls) if model_urls else MagicMock(spec=ServerClient)
    server = server_class(config=config, server_client=servers)
    app = server.setup_webserver()
    with open(rows_path, encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    results = []
    with TestClient(app, raise_server_exceptions=bool(os.environ.get("NGYM_REPLAY_RAISE"))) as client:  # one loop
        for row in rows:
            client.cookies.clear()  # one session per row
            results.append(replay_row(client, row))
    rewards = [reward for reward, _ in results]
    errors = [error for _, error in results]
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump({"rewards": rewards, "errors": errors}, handle)


if __name__ == "__main__":
    arguments = sys.argv[1:7]
    del sys.argv[1:]  # NeMo Gym's global config parses the command line as Hydra overrides
    main(*arguments)
