"""NeMo Gym's rollout collection (``nemo_gym.rollout_collection``): the row vocabulary, the collection and
aggregation configs, and the collector ``RolloutCollectionHelper.run_from_config`` behind ``gym eval run``.

The collector reads ``input_jsonl_fpath``, sends every (row, repeat) to ``/run`` of the environment server in
front of its agent (the agent itself when none fronts it), and writes rollouts, failures sidecar, materialized
inputs and aggregate metrics beside ``output_jsonl_fpath``; see :mod:`nemo_gym._collection.runner`. Servers
are found by name through ``setup_server_client_utils()`` (a ``ServerClient`` over ``ngym run``'s configs and
``--model-url`` names) and the run's config through ``get_global_config_dict()``: both are looked up on this module
when called, so a test or driver may replace them here, as with NeMo Gym.

Not carried out (NeMo Gym features outside an environment's reach): model-call and training-token capture,
trajectory records, rollout upload to exporters, rollout health checks (a note is printed), telemetry spans,
run-level ``skills`` (refused with a clear error).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from nemo_gym._collection.config import (
    RolloutAggregationConfig,
    RolloutCollectionConfig,
    SharedRolloutCollectionConfig,
)
from nemo_gym._collection.dispatch import dispatch
from nemo_gym._collection.dispatch import episode_record as _episode_record
from nemo_gym._collection.metrics import call_aggregate_metrics
from nemo_gym._collection.perf import attach_ng_perf as _attach_ng_perf
from nemo_gym._collection.preprocess import expand_rows, read_input_rows
from nemo_gym._collection.records import (
    AGENT_REQUEST_FAILED_FAILURE_CLASS,
    AGENT_RUN_ERROR_FAILURE_CLASS,
    ENVIRONMENT_SERVER_FAILURE_CLASS,
    NG_DISPATCH_DRAINED_KEY,
    NG_ELAPSED_KEY,
    NG_ENVIRONMENT_SERVER_KEY,
    NG_FAILURE_CLASS_KEY,
    NG_NO_PERSIST_KEY,
    NG_PERF_KEY,
    NG_RESULT_TYPE_KEY,
    NG_TASK_ID_KEY,
    NG_TERMINAL_KEY,
    NG_TRAJECTORY_KEY,
    DispatchLatencyTracker,
    _dispatch_drained_result,
    _get_max_rollout_attempts,
    get_max_rollout_attempts,
    is_terminal_failure,
    migrate_invalid_judge_main_rows,
    observed_elapsed,
)
from nemo_gym._collection.records import CompletedRollout as _CompletedRollout
from nemo_gym._collection.routing import (
    AgentWithoutEnvironmentServerError,
    AmbiguousEnvironmentServerError,
    assign_agents,
    check_rows_routable,
)
from nemo_gym._collection.routing import environment_server_for_agent as _environment_server_for_agent
from nemo_gym._collection.routing import environment_servers_by_agent as _environment_servers_by_agent
from nemo_gym._collection.runner import collect
from nemo_gym._collection.shards import aggregate_shards
from nemo_gym.global_config import get_global_config_dict
from nemo_gym.server_utils import ServerClient

__all__ = [
    "AGENT_REQUEST_FAILED_FAILURE_CLASS",
    "AGENT_RUN_ERROR_FAILURE_CLASS",
    "ENVIRONMENT_SERVER_FAILURE_CLASS",
    "NG_DISPATCH_DRAINED_KEY",
    "NG_ELAPSED_KEY",
    "NG_ENVIRONMENT_SERVER_KEY",
    "NG_FAILURE_CLASS_KEY",
    "NG_NO_PERSIST_KEY",
    "NG_PERF_KEY",
    "NG_RESULT_TYPE_KEY",
    "NG_TASK_ID_KEY",
    "NG_TERMINAL_KEY",
    "NG_TRAJECTORY_KEY",
    "AgentWithoutEnvironmentServerError",
    "AmbiguousEnvironmentServerError",
    "DispatchLatencyTracker",
    "RolloutAggregationConfig",
    "RolloutAggregationHelper",
    "RolloutCollectionConfig",
    "RolloutCollectionHelper",
    "SharedRolloutCollectionConfig",
    "_CompletedRollout",
    "_attach_ng_perf",
    "_dispatch_drained_result",
    "_environment_server_for_agent",
    "_environment_servers_by_agent",
    "_episode_record",
    "_get_max_rollout_attempts",
    "get_global_config_dict",
    "get_max_rollout_attempts",
    "is_terminal_failure",
    "migrate_invalid_judge_main_rows",
    "observed_elapsed",
    "setup_server_client_utils",
]


def setup_server_client_utils(head_server_config: Any = None) -> ServerClient:
    """The client the collector calls servers through (NeMo's ``server_utils.setup_server_client``): names resolve
    as ``ngym run`` was told. Requests go through ``server_utils``' per-event-loop session, or the process-wide one
    when code has set it up (NeMo sets one here; ngym does not, as a session is bound to one event loop)."""
    return ServerClient.load_from_global_config(head_server_config)


class RolloutCollectionHelper(BaseModel):
    """NeMo Gym's collector. ``run_from_config`` runs a whole collection; drivers (GDPVal's multi-stage ELO) call
    its steps themselves: ``_preprocess_rows_from_config``, ``_run_examples_with_metadata``,
    ``_call_aggregate_metrics``."""

    async def run_from_config(self, config: RolloutCollectionConfig) -> list[dict[str, Any]]:
        return await collect(self, config)

    def _preprocess_rows_from_config(self, config: RolloutCollectionConfig) -> list[dict[str, Any]]:
        return read_input_rows(config)

    def preprocess_examples(
        self,
        examples: list[dict[str, Any]],
        *,
        agent_map: dict[str, str] | None = None,
        fan_out: dict[str, list[str]] | None = None,
        num_repeats: int | dict[str, int] = 1,
        num_repeats_add_seed: bool = False,
        global_config_dict: Any = None,
    ) -> list[dict[str, Any]]:
        """Routing and repeats applied to rows held in memory (copies; the inputs are not changed)."""
        config = RolloutCollectionConfig(
            input_jsonl_fpath="<in-memory>",
            output_jsonl_fpath="<in-memory>",
            agent_map=agent_map,
            fan_out=fan_out,
            num_repeats=num_repeats,
            num_repeats_add_seed=num_repeats_add_seed,
        )
        raw = [
            (i, orjson.dumps(row, option=orjson.OPT_SORT_KEYS).decode(), dict(row)) for i, row in enumerate(examples)
        ]
        rows = expand_rows(raw, config)
        if global_config_dict is not None:
            assign_agents(rows, global_config_dict)
        return rows

    def _run_examples_with_metadata(
        self,
        examples: list[dict[str, Any]],
        head_server_config: Any = None,
        semaphore: Any = None,
        route_failures_to_sidecar: bool = False,
        environment_server_name: str | None = None,
        **limits: Any,
    ) -> Iterator[Awaitable[_CompletedRollout]]:
        return dispatch(
            self.setup_server_client(head_server_config),
            examples,
            semaphore=semaphore,
            route_failures_to_sidecar=route_failures_to_sidecar,
            environment_server_name=environment_server_name,
            **limits,
        )

    def run_examples(
        self, examples: list[dict[str, Any]], head_server_config: Any = None, semaphore: Any = None, **options: Any
    ) -> Iterator[Awaitable[tuple[dict[str, Any], dict[str, Any]]]]:
        """Send rows as given (no routing or repeats applied: see ``preprocess_examples``); awaitables of
        ``(row, result)`` in the order the rollouts finish."""

        async def pair(future: Awaitable[_CompletedRollout]) -> tuple[dict[str, Any], dict[str, Any]]:
            completed = await future
            return completed.row, completed.result

        return map(pair, self._run_examples_with_metadata(examples, head_server_config, semaphore, **options))

    async def _call_aggregate_metrics(
        self, results: list[dict[str, Any]], rows: list[dict[str, Any]], output_fpath: Path
    ) -> Path | None:
        return await call_aggregate_metrics(self.setup_server_client(), results, rows, output_fpath)

    @staticmethod
    def resolve_task_sources(examples: list[dict[str, Any]], global_config_dict: Any) -> None:
        assign_agents(examples, global_config_dict)

    @staticmethod
    def _validate_agent_names(examples: list[dict[str, Any]], global_config_dict: Any) -> None:
        check_rows_routable(examples, global_config_dict)

    def setup_server_client(self, head_server_config: Any = None) -> ServerClient:
        return setup_server_client_utils(head_server_config)

    def _global_config_dict(self) -> Any:
        return get_global_config_dict()


class RolloutAggregationHelper(BaseModel):
    """NeMo Gym's ``gym eval aggregate``: metrics over rollout shards (see :mod:`nemo_gym._collection.shards`)."""

    async def run_from_config(self, config: RolloutAggregationConfig) -> Path | None:
        return await aggregate_shards(RolloutCollectionHelper(), config)
