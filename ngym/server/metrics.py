"""``/aggregate_metrics``: summary statistics of verify responses, per task and overall (NeMo Gym's keys).

Every numeric or boolean top-level field of a verify response (``reward``, ``accuracy``, ...) gets
``mean/<field>``, ``max/<field>``, ``min/<field>``, ``median/<field>`` and ``std/<field>`` (sample standard
deviation; 0 for a single value). Tasks are grouped by ``_ng_task_index``; ``pass@k/<field>`` is added for
binary fields (the unbiased estimator over each task's rollouts), as NeMo Gym's pass@k does.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Any

from ngym.server.protocol.bodies import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY, AggregateMetrics

_INDEX_KEYS = {TASK_INDEX_KEY, ROLLOUT_INDEX_KEY}


def numeric_fields(verify_response: dict[str, Any]) -> dict[str, float]:
    """The top-level numbers and booleans of one verify response (booleans as 0/1), minus index keys."""
    fields: dict[str, float] = {}
    for key, value in verify_response.items():
        if key in _INDEX_KEYS:
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


def aggregate_metrics(
    verify_responses: list[dict[str, Any]], key_fields: tuple[str, ...] = ("reward",)
) -> AggregateMetrics:
    """Group-level (per task), agent-level (overall) and key metrics of a batch of verify responses."""
    by_task: dict[Any, list[dict[str, float]]] = defaultdict(list)
    all_rows: list[dict[str, float]] = []
    for response in verify_responses:
        row = numeric_fields(response)
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

    key = {name: value for name, value in agent.items() if name.split("/")[-1] in key_fields}
    return AggregateMetrics(group_level_metrics=group_level, agent_metrics=agent, key_metrics=key)
