"""NeMo Gym's metric helpers for ``compute_metrics`` / ``get_key_metrics``: ngym's own (``ngym.reward_profile``)."""

from typing import Any

from ngym.reward_profile import *  # noqa: F403 - the helpers, under NeMo Gym's module name
from ngym.reward_profile import (
    PassMajorityStat,
    add_avg_sample_std_dev,
    compute_pass_majority_metrics,
    compute_subset_metrics,
    highest_k_metrics,
)
from ngym.server.metrics import aggregate_metrics

__all__ = [
    "AggregateMetricsMixin",
    "PassMajorityStat",
    "add_avg_sample_std_dev",
    "compute_aggregate_metrics",
    "compute_pass_majority_metrics",
    "compute_subset_metrics",
    "highest_k_metrics",
]


def compute_aggregate_metrics(verify_responses: list[dict[str, Any]], **hooks: Any) -> Any:
    """``/aggregate_metrics`` of ``verify_responses`` with NeMo Gym's hook keywords (``compute_metrics_fn``, ...)."""
    hooks.pop("compute_repeat_metrics_fn", None)  # ngym's compute_metrics sees the repeats grouped by task already
    return aggregate_metrics(verify_responses, **hooks)


class AggregateMetricsMixin:
    """NeMo Gym's metric hooks, with its defaults (``SimpleResourcesServer`` here inherits them).

    ``compute_repeat_metrics`` is accepted for signature compatibility; ngym's ``/aggregate_metrics`` does not
    compute per-repeat metrics, so an override of it is not called.
    """

    def compute_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        """Extra run-wide metrics from the verify responses grouped by task (default: none)."""
        return {}

    def compute_repeat_metrics(self, tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        return {}

    def get_key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        """The headline metrics: every ``mean/*`` entry (NeMo Gym's default)."""
        return {name: value for name, value in agent_metrics.items() if name.startswith("mean/")}
