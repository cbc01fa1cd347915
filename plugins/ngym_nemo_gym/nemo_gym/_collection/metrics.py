"""Aggregate metrics of collected rollouts: what is scored, which server scores it, the file it goes to.

The score covers the rollouts file's rows, plus two opt-ins that keep a failed run from reading better than it
did: sidecar failures of the classes in ``count_failure_classes_as_zero`` and (``count_missing_rollouts_as_zero``)
materialized rollouts that left no row anywhere, each as a zero in the metric input only. Rows are scored by the
environment server they ran through (``_ng_environment_server``), else the one fronting their agent, else the
agent itself; ``<stem>_aggregate_metrics.json`` holds one entry per server.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from nemo_gym._collection.records import (
    NG_ENVIRONMENT_SERVER_KEY,
    NG_TRAJECTORY_KEY,
    read_jsonl,
    rollout_key,
)
from nemo_gym._collection.routing import (
    ENVIRONMENT_SERVER_TYPE_KEY_NAME,
    agent_of_row,
    dispatch_server_for_agent,
    environment_servers_by_agent,
)
from nemo_gym.config_types import AggregateMetrics, AggregateMetricsRequest
from nemo_gym.global_config import (
    AGENT_REF_KEY_NAME,
    RESPONSES_CREATE_PARAMS_KEY_NAME,
    ROLLOUT_INDEX_KEY_NAME,
    TASK_INDEX_KEY_NAME,
    label_runs,
)
from nemo_gym.path_utils import aggregate_metrics_path_for
from nemo_gym.server_utils import ServerClient, get_response_json, raise_for_status
from ngym.plugin_api import verify_responses

#: fields too heavy for /aggregate_metrics (the response's usage and incomplete_details are kept)
_NOT_SENT = (
    "response",
    RESPONSES_CREATE_PARAMS_KEY_NAME,
    "ng_agent_observations",
    "ng_model_call_capture",
    NG_TRAJECTORY_KEY,
)

Group = Callable[[Mapping[str, Any]], str | None]


def routing_identity(row: Mapping[str, Any]) -> str | None:
    """What a rollout ran on: its agent, else (a materialized task names none) its environment server."""
    return (row.get(AGENT_REF_KEY_NAME) or {}).get("name") or row.get(NG_ENVIRONMENT_SERVER_KEY)


def identity_key(row: Mapping[str, Any], group: Group) -> tuple[Any, ...]:
    """A rollout across runs, which each number their tasks from 0: (group, task, rollout)."""
    return (group(row), *rollout_key(row))


async def call_aggregate_metrics(
    client: ServerClient, results: list[dict[str, Any]], rows: list[dict[str, Any]], output_fpath: Path
) -> Path | None:
    """POST each server's rollouts to its ``/aggregate_metrics`` and write the answers to
    ``<stem>_aggregate_metrics.json``; its path (``None`` when there is nothing to score)."""
    if not results:
        return None
    global_config = client.global_config_dict or {}
    declared = {
        str(name)
        for name, block in global_config.items()
        if isinstance(block, Mapping) and ENVIRONMENT_SERVER_TYPE_KEY_NAME in block
    }
    servers_by_agent = environment_servers_by_agent(global_config)
    by_server: dict[str, list[dict[str, Any]]] = {}
    agent_of_server: dict[str, str | None] = {}
    for row, result in zip(rows, results, strict=True):
        agent = (row.get(AGENT_REF_KEY_NAME) or result.get(AGENT_REF_KEY_NAME) or {}).get("name")
        server = row.get(NG_ENVIRONMENT_SERVER_KEY) or result.get(NG_ENVIRONMENT_SERVER_KEY)
        if not isinstance(server, str):
            if not agent:
                continue
            server = dispatch_server_for_agent(agent, servers_by_agent)
        elif declared and server not in declared:
            raise ValueError(
                f"Result rows are stamped with environment server {server!r}, which is not in the running config "
                f"(available: {sorted(declared)}); aggregate with the config that produced them"
            )
        by_server.setdefault(server, []).append(result)
        if server not in agent_of_server:
            agent_of_server[server] = agent or agent_of_row({NG_ENVIRONMENT_SERVER_KEY: server}, global_config)
    labels = label_runs(agent_of_server)

    async def one(server: str, label: str, server_results: list[dict[str, Any]]) -> dict[str, Any]:
        # The ledger's /aggregate_metrics body: heavy fields out, the response's usage and incomplete_details kept.
        sent = verify_responses(server_results, drop=_NOT_SENT, keep_from_response=("usage", "incomplete_details"))
        request = AggregateMetricsRequest(verify_responses=sent)
        response = await client.post(server_name=server, url_path="/aggregate_metrics", json=request)
        await raise_for_status(response)
        answer = AggregateMetrics.model_validate(await get_response_json(response))
        entry = {
            AGENT_REF_KEY_NAME: {"name": label},
            NG_ENVIRONMENT_SERVER_KEY: server,
            "agent_metrics": answer.agent_metrics,
            "key_metrics": answer.key_metrics,
            "group_level_metrics": answer.group_level_metrics,
            "repeat_level_metrics": answer.repeat_level_metrics,
        }
        perf_summary = getattr(answer, "perf_summary", None)
        if perf_summary is not None:
            entry["perf_summary"] = perf_summary
        return entry

    entries = []
    for finished in asyncio.as_completed([one(s, labels[s], rs) for s, rs in by_server.items()]):
        entry = await finished
        entries.append(entry)
        print(f"\nKey metrics for {entry[AGENT_REF_KEY_NAME]['name']}:\n" + json.dumps(entry["key_metrics"], indent=4))
    path = aggregate_metrics_path_for(output_fpath)
    path.write_bytes(orjson.dumps(entries, option=orjson.OPT_INDENT_2))
    return path


def fill_task_fields(
    added: list[dict[str, Any]], real: list[dict[str, Any]], materialized_fpaths: Iterable[Path], group: Group
) -> None:
    """Give rows added to the metric input (counted failures, imputed zeros) their task's dataset fields.

    Metric hooks read task-level fields (a subset label, a weight) from a task's first rollout, which an added
    row can be. Only fields the real rows of the same group carry are copied (``/aggregate_metrics`` averages every
    number it gets, so a new one would become a metric), never private ones, the parameters or the response.
    """
    wanted = {identity_key(row, group): row for row in added}
    if not wanted:
        return
    carried: dict[str | None, set[str]] = defaultdict(set)
    for row in real:
        carried[group(row)].update(row)
    for path in materialized_fpaths:
        if not path.exists():
            continue
        for source in read_jsonl(path):
            target = wanted.get(identity_key(source, group))
            if target is None:
                continue
            for key in carried[group(source)] & source.keys():
                if not key.startswith("_") and key not in (RESPONSES_CREATE_PARAMS_KEY_NAME, "response"):
                    target.setdefault(key, source[key])


def missing_rollouts_as_zero(
    materialized_fpath: Path, recorded_failures: set[tuple[Any, Any]], scored: set[tuple[Any, Any]]
) -> list[dict[str, Any]]:
    """Materialized rollouts with no row in the rollouts file or the sidecar, as zeros (``scored`` grows).

    A recorded failure is never counted here, whatever its class: ``count_failure_classes_as_zero`` decides those.
    """
    if not materialized_fpath.exists():
        print(f"[WARNING] {materialized_fpath} is missing; rollouts owed by that shard cannot be counted")
        return []
    zeros, unroutable = [], 0
    for row in read_jsonl(materialized_fpath):
        key = rollout_key(row)
        if key in scored or key in recorded_failures:
            continue
        if routing_identity(row) is None:
            unroutable += 1
            continue
        scored.add(key)
        zero = {
            TASK_INDEX_KEY_NAME: row.get(TASK_INDEX_KEY_NAME),
            ROLLOUT_INDEX_KEY_NAME: row.get(ROLLOUT_INDEX_KEY_NAME),
            AGENT_REF_KEY_NAME: row.get(AGENT_REF_KEY_NAME),
            "reward": 0.0,
        }
        if NG_ENVIRONMENT_SERVER_KEY in row:
            zero[NG_ENVIRONMENT_SERVER_KEY] = row[NG_ENVIRONMENT_SERVER_KEY]
        zeros.append(zero)
    if unroutable:
        print(f"[WARNING] {unroutable} materialized rollout(s) name no agent or environment server and are not counted")
    return zeros


def coverage_report(expected: int, scored: int, failures: Mapping[str, int], where: Any, *, imputed: int = 0) -> str:
    """How much of the run the score covers, when it is not all of it (silence would make it look complete)."""
    report = ""
    if expected > scored:
        routed = ", ".join(f"{count} {name}" for name, count in sorted(failures.items()))
        routed = f"{routed} routed this run; " if routed else ""
        report = (
            f"\nRollouts missing from the score: {expected - scored} of {expected} materialized ({routed}see {where})"
            f"\nMetrics cover: {scored} of {expected} rollouts"
        )
    if imputed:
        report += f"\nScored as zero because they left no row: {imputed} of {expected} rollouts"
    return report
