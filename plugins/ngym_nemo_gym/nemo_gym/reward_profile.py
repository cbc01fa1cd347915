"""NeMo Gym's metric helpers for ``compute_metrics`` / ``get_key_metrics``: ngym's own (``ngym.reward_profile``),
and ``RewardProfiler``'s row-level methods.

NeMo's ``RewardProfiler`` also profiles whole runs into pandas frames and W&B histograms for ``gym eval
profile``; that reporting is rollout tooling ngym does not provide (ngym's ``/aggregate_metrics`` computes the
run's statistics), so those methods are absent and calling one is an ``AttributeError`` naming it.
"""

from collections import Counter
from typing import Any

from nemo_gym.global_config import ROLLOUT_INDEX_KEY_NAME, TASK_INDEX_KEY_NAME, rollout_run_key
from ngym.metrics.reward_profile import *  # noqa: F403 - the helpers, under NeMo Gym's module name
from ngym.metrics.reward_profile import (
    PassMajorityStat,
    add_avg_sample_std_dev,
    compute_pass_majority_metrics,
    compute_subset_metrics,
    highest_k_metrics,
)
from ngym.plugin_api import aggregate_metrics

__all__ = [
    "AggregateMetricsMixin",
    "PassMajorityStat",
    "RewardProfiler",
    "add_avg_sample_std_dev",
    "compute_aggregate_metrics",
    "compute_pass_majority_metrics",
    "compute_subset_metrics",
    "highest_k_metrics",
]


def compute_aggregate_metrics(verify_responses: list[dict[str, Any]], **hooks: Any) -> Any:
    """``/aggregate_metrics`` of ``verify_responses`` with NeMo Gym's hook keywords (``compute_metrics_fn``,
    ``get_key_metrics_fn``, ``compute_repeat_metrics_fn``)."""
    return aggregate_metrics(verify_responses, **hooks)


class AggregateMetricsMixin:
    """NeMo Gym's metric hooks, with its defaults (``SimpleResourcesServer`` here inherits them); ngym's
    ``/aggregate_metrics`` calls all three (``ngym.metrics.aggregate``, ``ngym.metrics.repeats``)."""

    def compute_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """Extra run-wide metrics from the verify responses grouped by task (default: none)."""
        return {}

    def compute_repeat_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """Metrics of one repeat, grouped by task, summarised across repeats (default: none)."""
        return {}

    def get_key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        """The headline metrics: every ``mean/*`` entry (NeMo Gym's default)."""
        return {name: value for name, value in agent_metrics.items() if name.startswith("mean/")}


RolloutKey = tuple[Any, Any]


def _rollout_key(row: dict[str, Any]) -> RolloutKey:
    return row[TASK_INDEX_KEY_NAME], row[ROLLOUT_INDEX_KEY_NAME]


class RewardProfiler:
    """Per-rollout views of a run's results: one numeric row per rollout, results matched to their inputs."""

    def _index_by_rollout_key(self, rows: list[dict[str, Any]], name: str) -> dict[RolloutKey, dict[str, Any]]:
        indexed: dict[RolloutKey, dict[str, Any]] = {}
        for row in rows:
            key = _rollout_key(row)
            if key in indexed:
                raise ValueError(f"Duplicate {name} row for rollout key {key}")
            indexed[key] = row
        return indexed

    def align_rows_and_results(
        self, rows: list[dict[str, Any]], results: list[dict[str, Any]], allow_partial_rollouts: bool = False
    ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(input row, result) pairs by ``(task index, rollout index)``, sorted. A result without an input is an
        error; an input without a result is one too unless ``allow_partial_rollouts``."""
        rows_by_key = self._index_by_rollout_key(rows, "materialized input")
        results_by_key = self._index_by_rollout_key(results, "result")
        extra = sorted(results_by_key.keys() - rows_by_key.keys())
        if extra:
            raise ValueError(
                "Rollout results contain rows with no matching materialized input rows. "
                f"Found {len(extra)} extra rollout rows. Extra rollout keys: {extra[:10]}"
            )
        missing = sorted(rows_by_key.keys() - results_by_key.keys())
        if missing and not allow_partial_rollouts:
            raise ValueError(
                "Materialized input rows and rollout results do not have matching rollout keys. "
                f"Missing rollout results for {len(missing)} materialized input rows. "
                f"Missing rollout keys: {missing[:10]}."
            )
        return [(rows_by_key[key], results_by_key[key]) for key in sorted(rows_by_key.keys() & results_by_key.keys())]

    def profile_completion_summary(self, rows: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
        """How complete a collection is: rollouts expected/completed/missing/extra, and input rows (per task and
        the environment server or agent that ran it) complete, partial or missing."""
        rows_by_key = self._index_by_rollout_key(rows, "materialized input")
        results_by_key = self._index_by_rollout_key(results, "result")
        matched = rows_by_key.keys() & results_by_key.keys()

        # One task fanned out to several agents shares its task index: count completion per (task, runner).
        def group(key: RolloutKey) -> tuple[Any, str | None]:
            return key[0], rollout_run_key(rows_by_key[key])

        expected = Counter(group(key) for key in rows_by_key)
        completed = Counter(group(key) for key in matched)
        complete = sum(1 for g, n in expected.items() if completed[g] == n)
        partial = sum(1 for g, n in expected.items() if 0 < completed[g] < n)
        total = len(rows_by_key)
        return {
            "expected_rollout_rows": total,
            "completed_rollout_rows": len(matched),
            "missing_rollout_rows": total - len(matched),
            "extra_rollout_rows": len(results_by_key.keys() - rows_by_key.keys()),
            "reward_profile_completion_pct": 100.0 if total == 0 else 100.0 * len(matched) / total,
            "total_input_rows": len(expected),
            "complete_input_rows": complete,
            "partial_input_rows": partial,
            "missing_input_rows": len(expected) - complete - partial,
        }

    def rollout_info_from_result(self, result: dict[str, Any]) -> dict[str, Any]:
        """One rollout's numbers: its id and indices, its reward, its token usage, and every other numeric
        top-level field (booleans as 0/1); ``_``-prefixed bookkeeping fields are left out."""
        task_index, rollout_index = _rollout_key(result)
        info: dict[str, Any] = {
            "rollout_id": f"{task_index}:{rollout_index}",
            TASK_INDEX_KEY_NAME: task_index,
            ROLLOUT_INDEX_KEY_NAME: rollout_index,
        }
        if "reward" in result:
            info["reward"] = result.get("reward")
        usage = (result.get("response") or {}).get("usage") or {}
        numeric = [*usage.items(), *((k, v) for k, v in result.items() if not k.startswith("_"))]
        for key, value in numeric:
            if key in {"reward", "response"}:
                continue
            if isinstance(value, bool):
                info[key] = int(value)
            elif isinstance(value, int | float):
                info[key] = value
        return info
