"""Repeat-level metrics of ``/aggregate_metrics`` (NeMo Gym 0.7.0's ``repeat_level_metrics`` and its hook).

A run that rolls every task out several times (``_ng_rollout_index`` 0, 1, ...) is also several whole runs, one
per repeat; how much a metric moves between them is the run's own noise. So, when there is more than one repeat:

- ``repeat_level_metrics``: one row per repeat with ``sample_count`` (tasks it has), ``missing_count`` (tasks
  it lacks) and, for each numeric field of the verify responses and of their ``response.usage``, ``mean/``,
  ``median/``, ``std/``, ``sem/``, ``min/``, ``max/``, ``p25/``, ``p75/`` and the 95% t-interval
  (``ci_low_95/``, ``ci_high_95/``) over that repeat's rollouts;
- across the repeats, each primary metric of those rows (a point estimate such as ``mean/reward``, not a
  spread or a bound) gets ``mean_across_repeats/``, ``median_…``, ``std_…``, ``min_…``, ``max_…``, ``se_…`` and
  the 95% interval, merged into the agent metrics;
- ``compute_repeat_metrics(tasks)`` (the environment's hook, NeMo Gym's name and signature) is called once per
  repeat with that repeat's verify responses grouped by task; the metrics it returns replace generic ones of
  the same name in every row, and are summarised across repeats like them. A metric is kept only when it is a
  finite number in every repeat (and in ``compute_metrics``'s full-run answer, when that has it too).

The arithmetic is NeMo Gym's (pandas and numpy there): sums in numpy's pairwise order, quantiles by numpy's
linear interpolation, sample standard deviations, so equal inputs give equal numbers (the t-interval to ~1e-12,
as scipy's Student-t quantile is matched by our own). Masked samples are left out by the caller.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ngym.server.protocol.bodies import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

log = logging.getLogger("ngym.server")

MASK_SAMPLE_KEY = "mask_sample"
ComputeRepeatMetrics = Callable[[list[list[dict[str, Any]]]], dict[str, Any]]

ACROSS_REPEATS_MARKER = "_across_repeats/"
_REPEAT_STATS = ("mean", "median", "std", "sem", "min", "max", "p25", "p75", "ci_low_95", "ci_high_95")
_ACROSS_STATS = ("mean", "median", "std", "min", "max", "se", "ci_low_95", "ci_high_95")
# What is not a primary metric (NeMo Gym's metrics_config): statistics other than the mean, bounds, companions.
_EXCLUDED_PREFIXES = tuple(f"{stat}/" for stat in (*_REPEAT_STATS, "se", "histogram") if stat != "mean")
_EXCLUDED_SUFFIXES = (
    "/max",
    "/min",
    "/median",
    "/p5",
    "/p25",
    "/p75",
    "/p95",
    "/ci_low_95",
    "/ci_high_95",
    "/ci_lower",
    "/ci_upper",
    "_ci_lower",
    "_ci_upper",
    "_ci95_lower",
    "_ci95_upper",
    "/_ng_attempt_index",
    "/std_dev_across_runs",
    "/std_err_across_runs",
    "/avg_sample_std_dev",
)
_EXCLUDED_NAMES = frozenset(
    {
        TASK_INDEX_KEY,
        ROLLOUT_INDEX_KEY,
        "_ng_attempt_index",
        "sample_count",
        "missing_count",
        "num_repeats",
        "token_usage_version",
    }
)


def is_primary_metric(name: object) -> bool:
    """Whether a metric is a point estimate worth summarising across repeats (``mean/reward``, ``accuracy``)."""
    return (
        isinstance(name, str)
        and name not in _EXCLUDED_NAMES
        and not name.startswith(_EXCLUDED_PREFIXES)
        and not name.endswith(_EXCLUDED_SUFFIXES)
        and ACROSS_REPEATS_MARKER not in name
    )


# ---- numpy's arithmetic --------------------------------------------------------------------------------


def _pairwise_sum(values: list[float], start: int = 0, count: int | None = None) -> float:
    """``numpy.sum`` of float64 values, in numpy's order (8 partial sums per block, blocks halved above 128)."""
    n = len(values) - start if count is None else count
    if n < 8:
        total = 0.0
        for i in range(start, start + n):
            total += values[i]
        return total
    if n <= 128:
        r = values[start : start + 8]
        end = start + n - n % 8
        for i in range(start + 8, end, 8):
            for j in range(8):
                r[j] += values[i + j]
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for i in range(end, start + n):
            total += values[i]
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(values, start, half) + _pairwise_sum(values, start + half, n - half)


def _mean(values: list[float]) -> float:
    return _pairwise_sum(values) / len(values)


def _sample_std(values: list[float]) -> float:
    """pandas' ``std(ddof=1)``: two passes, squares of ``mean - x``."""
    mean = _mean(values)
    return math.sqrt(_pairwise_sum([(mean - x) * (mean - x) for x in values]) / (len(values) - 1))


def _quantile(ordered: list[float], q: float) -> float:
    """numpy's ``linear`` quantile of sorted values (its virtual index and its two-sided interpolation)."""
    n = len(ordered)
    virtual = n * q + (1 + q * (1 - 1 - 1)) - 1
    below = min(max(math.floor(virtual), 0), n - 1)
    above = min(below + 1, n - 1)
    gamma = virtual - math.floor(virtual)
    a, b = ordered[below], ordered[above]
    diff = b - a
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def _median(ordered: list[float]) -> float:
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


# ---- the 95% t-interval ----------------------------------------------------------------------------------


def _log_gamma_ratio_half(a: float) -> float:
    """ln Γ(a + ½) − ln Γ(a), accurate to ~1e-16 also for large ``a`` (where subtracting two lgamma values
    would lose digits): Stirling's series with its two large terms combined."""
    if a < 30:
        return math.lgamma(a + 0.5) - math.lgamma(a)

    def series(z: float) -> float:
        return 1 / (12 * z) - 1 / (360 * z**3) + 1 / (1260 * z**5) - 1 / (1680 * z**7)

    return a * math.log1p(0.5 / a) + 0.5 * math.log(a) - 0.5 + (series(a + 0.5) - series(a))


def _t_upper_tail(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom, t >= 0: ½ I_x(df/2, ½) with x = df / (df + t²)
    (the regularised incomplete beta function, by its continued fraction with the modified Lentz method)."""
    t2 = t * t
    log_x, log_1mx = -math.log1p(t2 / df), math.log(t2 / (df + t2)) if t2 else -math.inf
    a, b = df / 2, 0.5
    if t2 == 0:
        return 0.5
    # ln B(df/2, ½) = ln Γ(½) − (ln Γ(df/2 + ½) − ln Γ(df/2))
    log_beta = 0.5 * math.log(math.pi) - _log_gamma_ratio_half(a)
    x = math.exp(log_x)
    swap = x > (a + 1) / (a + b + 2)  # then I_x(a, b) = 1 − I_{1−x}(b, a), whose fraction converges fast
    if swap:
        a, b, log_x, log_1mx = b, a, log_1mx, log_x
        x = t2 / (df + t2)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    regularised = math.exp(a * log_x + b * log_1mx - log_beta) * fraction / a
    return 0.5 * (1.0 - regularised if swap else regularised)


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (what ``scipy.stats.t.ppf`` gives, to
    ~1e-15): closed forms for 1 and 2 degrees of freedom, else Newton's method on the upper tail."""
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    if df == 1:  # Cauchy
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    tail = 1.0 - p
    log_density_at_0 = _log_gamma_ratio_half(df / 2) - 0.5 * math.log(df * math.pi)
    z = statistics.NormalDist().inv_cdf(p)
    t = z + (z**3 + z) / (4 * df)  # Cornish-Fisher's first term as the start
    for _ in range(100):
        density = math.exp(log_density_at_0 - (df + 1) / 2 * math.log1p(t * t / df))
        step = (_t_upper_tail(t, df) - tail) / density
        t += step
        if abs(step) <= 1e-15 * abs(t):
            break
    return t


def _confidence_interval(mean: float, sem: float, n: int) -> tuple[float, float] | None:
    """The 95% t-interval ``mean ± t * sem`` (NeMo Gym's; None for one value, a point when ``sem`` is 0)."""
    if n <= 1:
        return None
    if sem == 0:
        return mean, mean
    return mean + sem * t_quantile((1 - 0.95) / 2, n - 1), mean + sem * t_quantile((1 + 0.95) / 2, n - 1)


# ---- the metrics -----------------------------------------------------------------------------------------


def _measurements(response: dict[str, Any]) -> dict[str, float]:
    """A verify response's numeric top-level fields and ``response.usage`` counts (booleans as 0/1; no ``_`` keys
    nor the ``mask_sample`` flag; non-finite values count as missing: JSON cannot carry them)."""
    usage = (response.get("response") or {}).get("usage") or {}
    merged = {**response, **usage} if isinstance(usage, dict) else response
    row: dict[str, float] = {}
    for key, value in merged.items():
        if key.startswith("_") or key == MASK_SAMPLE_KEY or not isinstance(value, int | float):
            continue
        if isinstance(value, bool):
            row[key] = int(value)
        elif math.isfinite(value):
            row[key] = value
    return row


def repeat_level_metrics(scored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row of statistics per repeat, in repeat order; [] when there is only one repeat."""
    by_repeat: dict[Any, list[tuple[Any, dict[str, float]]]] = defaultdict(list)
    for response in scored:
        by_repeat[response.get(ROLLOUT_INDEX_KEY, 0)].append((response.get(TASK_INDEX_KEY, 0), _measurements(response)))
    if len(by_repeat) <= 1:
        return []
    total_tasks = len({task for rows in by_repeat.values() for task, _ in rows})
    columns = sorted({key for rows in by_repeat.values() for _, row in rows for key in row})
    metrics = []
    for repeat in sorted(by_repeat):
        rows = by_repeat[repeat]
        present = len({task for task, _ in rows})
        entry: dict[str, Any] = {
            ROLLOUT_INDEX_KEY: int(repeat),
            "sample_count": present,
            "missing_count": total_tasks - present,
        }
        for column in columns:
            values = [float(row[column]) for _, row in rows if column in row]
            if values:
                entry.update(_describe_repeat(column, values))
        metrics.append(entry)
    incomplete = [entry for entry in metrics if entry["missing_count"] > 0]
    if incomplete:
        log.warning(
            "%d repeat(s) lack rollouts of some tasks (e.g. %s %s misses %d): repeat_level_metrics come from "
            "unequal samples",
            len(incomplete),
            ROLLOUT_INDEX_KEY,
            incomplete[0][ROLLOUT_INDEX_KEY],
            incomplete[0]["missing_count"],
        )
    return metrics


def _describe_repeat(column: str, values: list[float]) -> dict[str, float]:
    n = len(values)
    ordered = sorted(values)
    mean = _mean(values)
    std = _sample_std(values) if n > 1 else 0.0
    sem = std / n**0.5
    stats = {
        f"mean/{column}": mean,
        f"median/{column}": _median(ordered),
        f"std/{column}": std,
        f"sem/{column}": sem,
        f"min/{column}": ordered[0],
        f"max/{column}": ordered[-1],
        f"p25/{column}": _quantile(ordered, 0.25),
        f"p75/{column}": _quantile(ordered, 0.75),
    }
    interval = _confidence_interval(mean, sem, n)
    if interval is not None:
        stats[f"ci_low_95/{column}"], stats[f"ci_high_95/{column}"] = interval
    return stats


def across_repeats(repeat_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each primary metric of the repeat rows summarised across the repeats (``mean_across_repeats/<name>``, ...)."""
    names = sorted(
        {name for row in repeat_rows for name, value in row.items() if is_primary_metric(name) and _is_number(value)}
    )
    out: dict[str, float] = {}
    for name in names:
        values = [float(row[name]) for row in repeat_rows if _is_number(row.get(name)) and not math.isnan(row[name])]
        n = len(values)
        if not n:
            continue
        ordered = sorted(values)
        mean = _mean(values)
        std = _sample_std(values) if n > 1 else 0.0
        se = std / n**0.5
        out[f"mean{ACROSS_REPEATS_MARKER}{name}"] = mean
        out[f"median{ACROSS_REPEATS_MARKER}{name}"] = _median(ordered)
        out[f"std{ACROSS_REPEATS_MARKER}{name}"] = std
        out[f"min{ACROSS_REPEATS_MARKER}{name}"] = ordered[0]
        out[f"max{ACROSS_REPEATS_MARKER}{name}"] = ordered[-1]
        out[f"se{ACROSS_REPEATS_MARKER}{name}"] = se
        interval = _confidence_interval(mean, se, n)
        if interval is not None:
            out[f"ci_low_95{ACROSS_REPEATS_MARKER}{name}"], out[f"ci_high_95{ACROSS_REPEATS_MARKER}{name}"] = interval
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite_number(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def add_custom_repeat_metrics(
    scored: list[dict[str, Any]],
    repeat_rows: list[dict[str, Any]],
    agent_metrics: dict[str, Any],
    full_run_custom: dict[str, Any],
    compute_repeat_metrics_fn: ComputeRepeatMetrics,
    group_by_task: Callable[[list[dict[str, Any]]], list[list[dict[str, Any]]]],
) -> None:
    """Run the environment's ``compute_repeat_metrics`` on each repeat; put its numbers in the repeat rows (in
    place of generic ones of the same name) and their across-repeat summaries in ``agent_metrics``."""
    if not repeat_rows:
        return
    by_repeat: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for response in scored:
        by_repeat[response.get(ROLLOUT_INDEX_KEY, 0)].append(response)
    per_repeat = [
        dict(compute_repeat_metrics_fn(group_by_task(by_repeat[row[ROLLOUT_INDEX_KEY]]))) for row in repeat_rows
    ]
    names = {name for metrics in per_repeat for name in metrics}
    if not names:
        return
    for name in names:
        values = [metrics.get(name) for metrics in per_repeat]
        for row in repeat_rows:
            row.pop(name, None)
        full_run_ok = name not in full_run_custom or _is_finite_number(full_run_custom[name])
        if full_run_ok and all(_is_finite_number(value) for value in values):
            for row, value in zip(repeat_rows, values, strict=True):
                row[name] = float(value)  # type: ignore[arg-type]  # checked finite above
    for name in list(agent_metrics):
        if ACROSS_REPEATS_MARKER in name and name.split(ACROSS_REPEATS_MARKER, 1)[1] in names:
            del agent_metrics[name]
    agent_metrics.update(across_repeats(repeat_rows))
