"""Metrics over rollout shards collected separately (NeMo Gym's ``gym eval aggregate``).

Every file ``input_glob`` matches (comma-separated globs; a shard's own ``_failures`` and
``_materialized_inputs`` files are skipped) is read, optionally merged into ``output_jsonl_fpath``, and scored
together, as the collection itself scores one run: the same opt-ins count sidecar failures and lost rollouts as
zeros. Each shard is checked against its own rows and sidecar, and rollouts are keyed by the server that scores
them, since separate runs number their tasks from 0.
"""

from __future__ import annotations

import functools
import glob
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from nemo_gym._collection.config import RolloutAggregationConfig
from nemo_gym._collection.metrics import (
    coverage_report,
    fill_task_fields,
    identity_key,
    missing_rollouts_as_zero,
    routing_identity,
)
from nemo_gym._collection.records import (
    NG_ENVIRONMENT_SERVER_KEY,
    NG_FAILURE_CLASS_KEY,
    counted_failure_row,
    latest_failure_rows,
    read_jsonl,
    rollout_key,
    rollout_order,
)
from nemo_gym._collection.routing import environment_servers_by_agent
from nemo_gym.global_config import AGENT_REF_KEY_NAME
from nemo_gym.path_utils import failures_path_for, materialized_path_for
from nemo_gym.server_utils import ServerClient
from ngym import ConfigError


class AggregationSteps(Protocol):
    def setup_server_client(self, head_server_config: Any = None) -> ServerClient: ...
    async def _call_aggregate_metrics(
        self, results: list[dict[str, Any]], rows: list[dict[str, Any]], output_fpath: Path
    ) -> Path | None: ...


def expand_input_glob(input_glob: str) -> list[str]:
    """The shard files of a glob or comma-separated globs: sorted per pattern, each once."""
    found: dict[str, None] = {}
    for pattern in (p.strip() for p in input_glob.split(",")):
        for path in sorted(glob.glob(pattern)) if pattern else []:
            if not Path(path).stem.endswith(("_failures", "_materialized_inputs")):
                found.setdefault(path, None)
    return list(found)


async def aggregate_shards(steps: AggregationSteps, config: RolloutAggregationConfig) -> Path | None:
    """Score the shards (see the module docstring); the aggregate-metrics file's path."""
    paths = expand_input_glob(config.input_glob)
    if not paths:
        raise ConfigError(f"No shards matched input_glob={config.input_glob!r}")
    print(f"Aggregating {len(paths)} shard(s): {', '.join(paths)}")
    results: list[dict[str, Any]] = []
    keys_of_shard: dict[str, set[tuple[Any, Any]]] = {}
    for path in paths:
        shard = read_jsonl(Path(path))
        keys_of_shard[path] = {rollout_key(r) for r in shard}
        results.extend(shard)
    results.sort(key=lambda r: rollout_key(r))
    output = Path(config.output_jsonl_fpath)
    output.parent.mkdir(parents=True, exist_ok=True)
    if config.merge_shards:
        with output.open("wb") as handle:
            handle.writelines(orjson.dumps(r) + b"\n" for r in results)

    @functools.cache
    def servers_by_agent() -> Mapping[str, list[str]]:
        # The server client is needed only when something is to be scored or counted.
        if not (results or config.count_failure_classes_as_zero or config.count_missing_rollouts_as_zero):
            return {}
        return environment_servers_by_agent(steps.setup_server_client().global_config_dict or {})

    def group(row: Mapping[str, Any]) -> str | None:
        # The server a rollout is scored under: its stamp, else the one server fronting its agent, else the agent.
        stamp = row.get(NG_ENVIRONMENT_SERVER_KEY)
        if isinstance(stamp, str):
            return stamp
        agent = (row.get(AGENT_REF_KEY_NAME) or {}).get("name")
        servers = servers_by_agent().get(agent, []) if agent else []
        return servers[0] if len(servers) == 1 else agent

    failures_paths = [failures_path_for(Path(p)) for p in paths]
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path, failures_path in zip(paths, failures_paths, strict=True):
        for key, row in latest_failure_rows([failures_path]).items():
            if key not in keys_of_shard[path]:
                latest[identity_key(row, group)] = row
    landed = {identity_key(r, group) for r in results} if latest or config.count_missing_rollouts_as_zero else set()
    wanted = set(config.count_failure_classes_as_zero)
    counted = [
        counted_failure_row(row)
        for identity, row in latest.items()
        if identity not in landed and row.get(NG_FAILURE_CLASS_KEY) in wanted and routing_identity(row) is not None
    ]
    materialized_paths = [materialized_path_for(Path(p)) for p in paths]
    missing: list[dict[str, Any]] = []
    if config.count_missing_rollouts_as_zero:
        accounted = landed | set(latest)
        for path, materialized, failures_path in zip(paths, materialized_paths, failures_paths, strict=True):
            recorded = set(latest_failure_rows([failures_path]))
            for zero in missing_rollouts_as_zero(materialized, recorded, set(keys_of_shard[path])):
                if identity_key(zero, group) not in accounted:
                    accounted.add(identity_key(zero, group))
                    missing.append(zero)
        counted.extend(missing)
    if counted:
        fill_task_fields(counted, results, materialized_paths, group)
    scored = sorted(results + counted, key=rollout_order)
    metrics_path = await steps._call_aggregate_metrics(scored, scored, output)

    counted_ids = {identity_key(r, group) for r in counted}
    dropped = Counter(
        row.get(NG_FAILURE_CLASS_KEY) or "unknown"
        for identity, row in latest.items()
        if identity not in landed and identity not in counted_ids
    )
    total = len(results) + len(counted)
    coverage = coverage_report(
        total + sum(dropped.values()), total, dropped, "the shards' _failures.jsonl sidecars", imputed=len(missing)
    )
    merged = output if config.merge_shards else "<not merged>"
    print(f"Finished rollout aggregation! Merged rollouts: {merged}\nAggregate metrics: {metrics_path}{coverage}")
    if not config.disable_health_check:
        print("Rollout health checks are NeMo Gym's (nemo_gym.rollout_health) and are not run under ngym.")
    return metrics_path
