"""One rollout collection, run by whichever ``nemo_gym`` the interpreter imports: NeMo Gym 0.7.0's own, or ngym's
compatibility layer. ``test_rollout_collection_parity.py`` runs it under both and compares the files.

Usage: ``python collection_scenario.py OUTPUT_DIR [failures|routing]``. A scripted agent serves ``/run`` on a free
local port (answers "yes" score 1.0; rows can fail with an HTTP 500, a judge failure, or on their first attempt
only) and ``/aggregate_metrics`` (records what it is sent).

- ``failures``: the collection routes through an environment server in front of the agent, repeats each row
  twice, sends failures to the sidecar and counts them as zeros, is then resumed (the first-attempt failures are
  retried), and the shards are aggregated offline.
- ``routing``: two agents, each behind its own environment server; ``limit``, ``agent_map``, ``fan_out``,
  per-agent ``num_repeats``, per-repeat seeds, interleaved repeats and ``responses_create_params`` overrides.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import nemo_gym.rollout_collection as collection
import nemo_gym.server_utils as http
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from omegaconf import OmegaConf

ROWS = [
    {"answer": "yes", "subset": "a"},
    {"answer": "no", "subset": "b"},
    {"answer": "yes", "fail": "judge", "subset": "a"},
    {"answer": "yes", "fail": "http", "subset": "b"},
    {"answer": "yes", "fail": "first", "subset": "a"},
]
COUNTED = ["judge_failed", "agent_run_error"]


def agent_app(out: Path) -> FastAPI:
    app = FastAPI()

    @app.post("/run")
    async def run(request: Request) -> Any:
        row = await request.json()
        failure = row.get("fail")
        if failure == "http" or (failure == "first" and row.get("_ng_attempt_index", 0) == 0):
            return JSONResponse({"detail": "no cohort"}, status_code=500)
        response = {"id": "r", "usage": {"total_tokens": 3}, "output": []}
        result = {**row, "response": response, "reward": 0.0, "_ng_group_attempt": 1}
        if failure == "judge":
            return {**result, "_ng_failure_class": "judge_failed", "failure_reason": "judge down", "mask_sample": True}
        return {**result, "reward": 1.0 if row["answer"] == "yes" else 0.0, "accuracy": row["answer"] == "yes"}

    @app.post("/aggregate_metrics")
    async def aggregate(request: Request) -> Any:
        rows = (await request.json())["verify_responses"]
        with (out / "aggregate_requests.jsonl").open("a") as handle:
            handle.write(json.dumps(rows, sort_keys=True) + "\n")
        mean = sum(r["reward"] for r in rows) / len(rows)
        return {"agent_metrics": {"mean/reward": mean, "n": len(rows)}, "key_metrics": {"mean/reward": mean}}

    return app


def serve(app: FastAPI) -> str:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


async def main(out: Path, variant: str) -> None:
    url = serve(agent_app(out))
    agents = ("agent", "other") if variant == "routing" else ("agent",)
    config_dict = OmegaConf.create(
        {
            **{name: {"responses_api_agents": {"simple_agent": {}}} for name in agents},
            **{
                f"{name}_env": {"environment_servers": {"legacy_agent": {"agent_server": {"name": name}}}}
                for name in agents
            },
        }
    )
    http._GLOBAL_AIOHTTP_CLIENT = None
    session = http.set_global_aiohttp_client(http.GlobalAIOHTTPAsyncClientConfig())
    client = http.ServerClient.model_construct(global_config_dict=config_dict)
    # The environment servers are NeMo's legacy_agent relays, which forward unchanged: each is the agent's address.
    client._server_base_urls.update({name: url for name in config_dict})
    collection.setup_server_client_utils = lambda *args, **kwargs: client
    collection.get_global_config_dict = lambda: config_dict
    if variant == "routing":
        await routing(out)
    else:
        await failures(out)
    await session.close()


async def routing(out: Path) -> None:
    rows = [
        {"answer": "yes", "agent_ref": {"name": "old"}},
        {"answer": "no", "agent_ref": {"name": "fan"}},
        {"answer": "yes", "agent_ref": {"name": "old"}},  # the same line as the first: the same task
        {"answer": "no"},
        {"answer": "never read"},  # beyond the limit
    ]
    rows = [{**r, "responses_create_params": {"input": [{"role": "user", "content": r["answer"]}]}} for r in rows]
    (out / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = collection.RolloutCollectionConfig(
        input_jsonl_fpath=str(out / "in.jsonl"),
        output_jsonl_fpath=str(out / "rollouts.jsonl"),
        limit=4,
        agent_map={"old": "agent", "_default": "other"},
        fan_out={"fan": ["agent", "other"]},
        num_repeats={"agent": 2, "_default": 3},
        num_repeats_add_seed=True,
        interleave_repeats=True,
        responses_create_params={"temperature": 0.5},
        disable_health_check=True,
        upload_rollouts=False,
    )
    await collection.RolloutCollectionHelper().run_from_config(config)


async def failures(out: Path) -> None:
    rows = [{**r, "responses_create_params": {"input": [{"role": "user", "content": r["answer"]}]}} for r in ROWS]
    (out / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = collection.RolloutCollectionConfig(
        input_jsonl_fpath=str(out / "in.jsonl"),
        output_jsonl_fpath=str(out / "rollouts.jsonl"),
        agent_name="agent",
        num_repeats=2,
        num_samples_in_parallel=3,
        route_failures_to_sidecar=True,
        count_failure_classes_as_zero=COUNTED,
        count_missing_rollouts_as_zero=True,
        disable_health_check=True,
        upload_rollouts=False,
    )
    await collection.RolloutCollectionHelper().run_from_config(config)
    config.resume_from_cache = True
    await collection.RolloutCollectionHelper().run_from_config(config)
    await collection.RolloutAggregationHelper().run_from_config(
        collection.RolloutAggregationConfig(
            input_glob=str(out / "rollouts.jsonl"),
            output_jsonl_fpath=str(out / "merged" / "merged.jsonl"),
            count_failure_classes_as_zero=COUNTED,
            disable_health_check=True,
        )
    )


if __name__ == "__main__":
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    asyncio.run(main(target, sys.argv[2] if len(sys.argv) > 2 else "failures"))
