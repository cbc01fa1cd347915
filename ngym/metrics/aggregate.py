"""``/aggregate_metrics``: summary statistics of verify responses, per task and overall (NeMo Gym's keys).

Every numeric or boolean top-level field of a verify response (``reward``, ``accuracy``, ...; not the ``_``-prefixed
bookkeeping keys such as ``_ng_task_index``, as in NeMo Gym) gets
``mean/<field>``, ``max/<field>``, ``min/<field>``, ``median/<field>`` and ``std/<field>`` (sample standard
deviation; 0 for a single value). Tasks are grouped by ``_ng_task_index``; ``pass@k/<field>`` is added for
binary fields (the unbiased estimator over each task's rollouts), as NeMo Gym's pass@k does. Masked samples
(``mask_sample``) are left out and counted in ``coverage/*``; an environment adds its own metrics and picks its
key metrics with the ``compute_metrics`` / ``get_key_metrics`` hooks (NeMo Gym's names). With several repeats
(``_ng_rollout_index``), ``repeat_level_metrics`` and the across-repeat summaries come from
``ngym.metrics.repeats`` (with the ``compute_repeat_metrics`` hook).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ngym.metrics.repeats import (
    ACROSS_REPEATS_MARKER,
    ComputeRepeatMetrics,
    across_repeats,
    add_custom_repeat_metrics,
    repeat_level_metrics,
)
from ngym.server.protocol.bodies import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY, AggregateMetrics


def numeric_fields(verify_response: dict[str, Any]) -> dict[str, float]:
    """The top-level numbers and booleans of one verify response (booleans as 0/1), minus private keys.

    A key starting with ``_`` is bookkeeping, not a measurement (``_ng_task_index``, ``_ng_group_attempt``,
    ``_ng_attempt_index``, ...): NeMo Gym 0.7.0 leaves those out of its metrics too.
    """
    fields: dict[str, float] = {}
    for key, value in verify_response.items():
        if key.startswith("_"):
            continue
        if isinstance(value, bool) or isinstance(value, int | float) and math.isfinite(value):
            fields[key] = float(value)
    return fields


def describe(rows: list[dict[str, float]]) -> dict[str, float]:
    """mean/max/min/median/std of each field over ``rows``."""
    columns: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for key, value in row.items():
            columns[key].append(value)
    stats: dict[str, float] = {}
    for key, values in columns.items():
        stats[f"mean/{key}"] = statistics.fmean(values)
        stats[f"max/{key}"] = max(values)
        stats[f"min/{key}"] = min(values)
        stats[f"median/{key}"] = statistics.median(values)
        stats[f"std/{key}"] = statistics.stdev(values) if len(values) > 1 else 0.0
    return stats


def pass_at_k(per_task: list[list[float]]) -> dict[str, float]:
    """Unbiased pass@k (k = 1..max rollouts) over tasks whose values are all 0/1; {} otherwise."""
    if not per_task or any(v not in (0.0, 1.0) for values in per_task for v in values):
        return {}
    result: dict[str, float] = {}
    for k in range(1, max(len(values) for values in per_task) + 1):
        scores = []
        for values in per_task:
            n, failures = len(values), sum(1 for v in values if v == 0.0)
            if k > n:
                continue
            scores.append(1.0 if failures < k else 1.0 - math.comb(failures, k) / math.comb(n, k))
        if scores:
            result[f"pass@{k}"] = statistics.fmean(scores)
    return result


MASK_SAMPLE_KEY = "mask_sample"
#: Verify-response fields that are flags or bookkeeping, not measurements: never summarised.
_NOT_MEASURED = {MASK_SAMPLE_KEY}

ComputeMetrics = Callable[[list[list[dict[str, Any]]]], dict[str, Any]]
GetKeyMetrics = Callable[[dict[str, Any]], dict[str, Any]]


def default_key_metrics(agent_metrics: dict[str, Any], key_fields: tuple[str, ...] = ("reward",)) -> dict[str, Any]:
    """Every statistic of the key fields (``mean/reward``, ``pass@4/reward``, ...), not their across-repeat spread."""
    return {
        name: value
        for name, value in agent_metrics.items()
        if name.split("/")[-1] in key_fields and ACROSS_REPEATS_MARKER not in name
    }


def group_by_task(verify_responses: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Verify responses grouped by ``_ng_task_index`` (missing counts as 0), in task order: what
    ``compute_metrics`` receives."""
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for response in verify_responses:
        groups[response.get(TASK_INDEX_KEY, 0)].append(response)
    return [groups[index] for index in sorted(groups)]


def coverage(all_responses: list[dict[str, Any]], scored: list[dict[str, Any]]) -> dict[str, int]:
    """How much of the run the quality metrics were computed from; {} when nothing was masked (NeMo's keys)."""
    if len(scored) == len(all_responses):
        return {}
    measured_tasks = {r.get(TASK_INDEX_KEY, 0) for r in scored}
    all_tasks = {r.get(TASK_INDEX_KEY, 0) for r in all_responses}
    return {
        "coverage/measured_rollouts": len(scored),
        "coverage/masked_rollouts": len(all_responses) - len(scored),
        "coverage/measured_tasks": len(measured_tasks),
        "coverage/fully_masked_tasks": len(all_tasks - measured_tasks),
    }


def aggregate_metrics(
    verify_responses: list[dict[str, Any]],
    key_fields: tuple[str, ...] = ("reward",),
    compute_metrics_fn: ComputeMetrics | None = None,
    get_key_metrics_fn: GetKeyMetrics | None = None,
    compute_repeat_metrics_fn: ComputeRepeatMetrics | None = None,
) -> AggregateMetrics:
    """Group-level (per task), agent-level (overall), key and repeat-level metrics of a batch of verify responses.

    A masked sample (``mask_sample: true``: its reward measures a failed judge or environment, not the policy)
    is left out of every quality metric and counted in ``coverage/*`` instead, as NeMo Gym 0.7.0 does.
    ``compute_metrics_fn`` gets the scored responses grouped by task and its dict is merged into the agent
    metrics; ``get_key_metrics_fn`` picks the key metrics from them (default: the statistics of ``key_fields``).
    With more than one repeat, ``repeat_level_metrics`` has a row per repeat, the agent metrics the spread across
    repeats, and ``compute_repeat_metrics_fn`` (run per repeat, grouped by task) adds its own numbers to both,
    in that order and with those rules as NeMo Gym 0.7.0's ``compute_aggregate_metrics``.
    """
    scored = [r for r in verify_responses if not r.get(MASK_SAMPLE_KEY)]
    covered = coverage(verify_responses, scored)
    if verify_responses and not scored:  # every sample masked: report that, not means over nothing
        return AggregateMetrics(agent_metrics=dict(covered), key_metrics=dict(covered))

    by_task: dict[Any, list[dict[str, float]]] = defaultdict(list)
    all_rows: list[dict[str, float]] = []
    for response in scored:
        row = {k: v for k, v in numeric_fields(response).items() if k not in _NOT_MEASURED}
        by_task[response.get(TASK_INDEX_KEY)].append(row)
        all_rows.append(row)

    group_level = []
    for task_index, rows in sorted(by_task.items(), key=lambda item: (item[0] is None, item[0])):
        group_level.append({TASK_INDEX_KEY: task_index, "num_rollouts": len(rows), **describe(rows)})

    agent = describe(all_rows)
    for field in key_fields:
        per_task = [[row[field] for row in rows if field in row] for rows in by_task.values()]
        for name, value in pass_at_k([values for values in per_task if values]).items():
            agent[f"{name}/{field}"] = value
    agent["num_rollouts"] = len(all_rows)
    agent["num_tasks"] = len(by_task)
    repeat_rows = repeat_level_metrics(scored)
    agent.update(across_repeats(repeat_rows))
    agent.update(covered)

    custom: dict[str, Any] = {}
    if compute_metrics_fn is not None and scored:
        custom = dict(compute_metrics_fn(group_by_task(scored)))
        per_task_metrics = custom.pop("per_task_metrics", None) or []
        by_index = {m.get(TASK_INDEX_KEY): m for m in per_task_metrics if isinstance(m, dict)}
        for group in group_level:
            extra = by_index.get(group[TASK_INDEX_KEY])
            if extra:
                group.update({k: v for k, v in extra.items() if k != TASK_INDEX_KEY})
        agent.update(custom)
    agent["num_repeats"] = len({r.get(ROLLOUT_INDEX_KEY, 0) for r in verify_responses})

    key = get_key_metrics_fn(agent) if get_key_metrics_fn is not None else default_key_metrics(agent, key_fields)
    key = {**key, **covered}
    # After the key metrics, as NeMo Gym does: the hook's across-repeat numbers are not headline numbers.
    if compute_repeat_metrics_fn is not None:
        add_custom_repeat_metrics(scored, repeat_rows, agent, custom, compute_repeat_metrics_fn, group_by_task)
    return AggregateMetrics(
        group_level_metrics=group_level, agent_metrics=agent, key_metrics=key, repeat_level_metrics=repeat_rows
    )
