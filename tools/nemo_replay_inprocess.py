"""Replay an environment's recorded example rollouts in-process against NeMo Gym 0.7.0 itself.

Run by ``tools/nemo_envs.py`` with the interpreter of a NeMo Gym virtualenv (it imports only the standard
library, the environment and ``nemo_gym``): builds the server the way NeMo's ``run_webserver`` does (its
config class from the YAML fields, NeMo's own ``ServerClient`` whose global config places each named model
server at the URL given, or a stand-in that fails every call when none is), then drives its real FastAPI
app through ``/seed_session`` and ``/verify`` for each row, one session (cookie jar) per row.

    python nemo_replay_inprocess.py MODULE:CLASS INSTANCE_NAME FIELDS_JSON PAYLOADS_JSONL OUT_JSON \
        [MODEL_URLS_JSON [CONFIG [OVERRIDES_JSON]]]

With CONFIG (the environment's YAML), the fields are read from it as NeMo Gym reads them, ``${...}`` resolved;
FIELDS_JSON is then unused.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any
from unittest.mock import MagicMock


def replay_row(client: Any, row: dict[str, Any]) -> tuple[float | None, str | None]:
    """Seed and verify one payload (``tools/nemo_envs.py``'s ``verify_payloads``) through ``client`` (FastAPI's
    TestClient or an httpx.Client: the same calls); (reward, failure). A Gymnasium-style server (no ``/verify``: NeMo's
    ``GymnasiumServer``) is replayed as an episode (``replay_episode``)."""
    seed = {k: v for k, v in row.items() if k != "response"}
    client.post("/seed_session", json=seed)
    response = client.post("/verify", json=row)
    if response.status_code == 404:
        return replay_episode(client, row)
    return _reward_of(response)


def replay_episode(client: Any, row: dict[str, Any]) -> tuple[float | None, str | None]:
    """Replay a recorded Gymnasium-style episode as NeMo Gym's ``gymnasium_agent`` ran it: ``/reset``, then one
    ``/step`` per model turn of the recorded output (``model_turns``) until the environment says terminated or
    truncated; the reward is the sum of the steps' rewards, as the agent's."""
    seed = {k: v for k, v in row.items() if k != "response"}
    reset = client.post("/reset", json=seed)
    if reset.status_code != 200:
        return None, f"HTTP {reset.status_code} on /reset: {reset.text[:300]}"
    info = (reset.json() or {}).get("info") or {}
    recorded = row.get("response") or {}
    total = 0.0
    for number, turn in enumerate(model_turns(recorded.get("output") or [])):
        body = {**seed, "response": {**recorded, "output": turn}}
        if info.get("supports_step_idempotency") is True:
            body["_ng_step_request_id"] = f"replay-{number}"
        reward, error = _reward_of(step := client.post("/step", json=body))
        if reward is None:
            return None, error
        total += reward
        data = step.json()
        if data.get("terminated") or data.get("truncated"):
            break
    return total, None


def _from_environment(item: dict[str, Any]) -> bool:
    """Whether the environment, not the model, put ``item`` into an episode's transcript: the agent appends
    each step's tool outputs and observation after the model's turn."""
    return item.get("type") == "function_call_output" or (
        item.get("type", "message") == "message" and item.get("role") in ("user", "system", "developer")
    )


def model_turns(output: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The model's turns of a recorded episode: the runs of model items between the environment's items."""
    turns: list[list[dict[str, Any]]] = [[]]
    for item in output:
        if _from_environment(item):
            if turns[-1]:
                turns.append([])
        else:
            turns[-1].append(item)
    return [turn for turn in turns if turn]


def is_server_error(error: str | None) -> bool:
    """True when a row's error (as ``replay_row`` writes it) is the server failing (a 5xx); any other HTTP
    answer without a reward is an answer (a 4xx: the row does not fit the request model)."""
    return (error or "").startswith("HTTP 5")


def _reward_of(response: Any) -> tuple[float | None, str | None]:
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code == 200 and isinstance(data, dict) and isinstance(data.get("reward"), int | float):
        return float(data["reward"]), data.get("_ng_failure_judge_error")
    return None, f"HTTP {response.status_code}: {response.text[:300]}"


def server_client(model_urls: dict[str, str]) -> Any:
    """NeMo's ``ServerClient`` with each model server name at its URL (``http://host:port``)."""
    from urllib.parse import urlparse

    from nemo_gym.config_types import BaseServerConfig
    from nemo_gym.server_utils import ServerClient
    from omegaconf import OmegaConf

    tree: dict[str, Any] = {}
    for name, url in model_urls.items():
        parsed = urlparse(url)
        tree[name] = {"responses_api_models": {"scripted": {"host": parsed.hostname, "port": parsed.port}}}
    head = BaseServerConfig(host="127.0.0.1", port=1)
    return ServerClient(head_server_config=head, global_config_dict=OmegaConf.create(tree))


def resolved_fields(config_path: str, instance: str, overrides: list[str] | None = None) -> dict[str, Any]:
    """The instance's fields as NeMo Gym's ``load_config_from_global_config`` gives them to the server: the
    config loaded with OmegaConf, ``overrides`` (``++policy_base_url=...``) merged on top, and the instance's node
    resolved against the whole tree (``${judge_base_url}``, ``${oc.env:VAR,default}``)."""
    from omegaconf import OmegaConf

    tree = OmegaConf.merge(OmegaConf.load(config_path), OmegaConf.from_dotlist(overrides or []))
    servers: Any = tree[instance]["resources_servers"]  # type: ignore[index]  # a mapping: NeMo's config shape
    node = servers[next(iter(servers))]
    fields: dict[str, Any] = OmegaConf.to_container(node, resolve=True)  # type: ignore[assignment]  # a mapping node
    return fields


def main(
    target: str,
    instance: str,
    fields_json: str,
    rows_path: str,
    out_path: str,
    urls_json: str = "{}",
    config_path: str = "",
    overrides_json: str = "[]",
) -> None:
    from fastapi.testclient import TestClient
    from nemo_gym.server_utils import ServerClient

    module_name, _, class_name = target.partition(":")
    server_class = getattr(importlib.import_module(module_name), class_name)
    config_class = server_class.model_fields["config"].annotation
    given = (
        resolved_fields(config_path, instance, json.loads(overrides_json)) if config_path else json.loads(fields_json)
    )
    fields = {"host": "127.0.0.1", "port": 0, "entrypoint": "app.py", "name": instance, **given}
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
    arguments = sys.argv[1:9]
    del sys.argv[1:]  # NeMo Gym's global config parses the command line as Hydra overrides
    main(*arguments)
