"""pass@k, majority@k and per-subset metrics for an environment's ``compute_metrics`` / ``get_key_metrics`` hooks.

The public names and signatures are NeMo Gym 0.7.0's (``nemo_gym.reward_profile``), so an environment ported
from NeMo Gym keeps its metric code, and the numbers are the same as NeMo's on the same input (a test runs
both). Every accuracy-like value is a percentage (0–100). Typical use::

    from ngym.metrics.reward_profile import compute_pass_majority_metrics, highest_k_metrics

    class MathServer(SimpleResourcesServer):
        def compute_metrics(self, tasks):
            metrics, *_ = compute_pass_majority_metrics(tasks, answer_key="extracted_answer")
            return metrics

        def get_key_metrics(self, agent_metrics):
            return highest_k_metrics(agent_metrics, "pass@{k}", score_names=["accuracy"])

Pure standard library: no pandas or scipy, so a server does not pay for them at start-up.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

__all__ = [
    "PassMajorityStat",
    "add_avg_sample_std_dev",
    "compute_pass_majority_metrics",
    "compute_subset_metrics",
    "highest_k_metrics",
]

ScoreFn = Callable[[dict[str, Any]], dict[str, Any]]
Tasks = list[list[dict[str, Any]]]
ScoreTable = list[list[dict[str, float]]]


class PassMajorityStat(str, Enum):
    """Companion statistics appended to a ``pass@1[avg-of-k]/<score>`` name (``…/<score>/<stat>``)."""

    STD_DEV_ACROSS_RUNS = "std_dev_across_runs"
    STD_ERR_ACROSS_RUNS = "std_err_across_runs"
    AVG_SAMPLE_STD_DEV = "avg_sample_std_dev"

    @property
    def suffix(self) -> str:
        return f"/{self.value}"


def _reward_as_accuracy(rollout: dict[str, Any]) -> dict[str, Any]:
    return {"accuracy": rollout["reward"]}


def _sum(values: Iterable[float]) -> float:
    """``sum()`` as Python 3.12+ computes it, on every Python ngym supports.

    Python 3.12 made the built-in ``sum`` of floats compensated (Neumaier); 3.11 adds naively. NeMo Gym runs
    on 3.12+, so on 3.11 a plain ``sum`` would differ from its metrics in the last digit (70.00000000000001
    for 70.0). This is the 3.12 algorithm: ints add exactly until the first float, then floats are
    compensated and ints are added as they come.
    """
    if sys.version_info >= (3, 12):
        return sum(values)
    items = iter(values)
    exact = 0
    for x in items:
        if isinstance(x, int):
            exact += x
            continue
        total, compensation = exact + x, 0.0
        break
    else:
        return exact
    for x in items:
        if isinstance(x, float):
            t = total + x
            compensation += (total - t) + x if abs(total) >= abs(x) else (x - t) + total
            total = t
        else:
            total += float(x)
    if compensation and math.isfinite(compensation):
        total += compensation
    return total


def _mean(values: list[float]) -> float:
    # sum/len rather than statistics.fmean: the same float arithmetic as NeMo Gym, so equal inputs give
    # bit-for-bit equal metrics (fmean rounds differently in the last place).
    return _sum(values) / len(values)


def _sample_std(values: list[float]) -> float:
    mean = _mean(values)
    return math.sqrt(_sum([(x - mean) ** 2 for x in values]) / (len(values) - 1))


def _is_binary(values: list[float]) -> bool:
    return all(v in (0, 1, 0.0, 1.0) for v in values)


def _pass_at_k(values: list[float], k: int) -> float:
    """One task's pass@k: the unbiased estimator for 0/1 scores, the best of the first k otherwise."""
    if not _is_binary(values):
        return max(values[:k])
    failures = sum(1 for v in values if not v)
    if failures < k:
        return 1.0
    return 1.0 - math.comb(failures, k) / math.comb(len(values), k)


def _majority_at_k(answers: list[Any], scores: list[dict[str, float]], name: str, k: int) -> float:
    """One task's majority@k: the score of the most frequent (answer, score) among the first k rollouts that
    have an answer; ties are averaged; no answer at all scores 0."""
    votes = Counter((a, s[name]) for a, s in zip(answers[:k], scores[:k], strict=False) if a is not None and name in s)
    if not votes:
        return 0
    top = max(votes.values())
    tied = [score for (_, score), count in votes.items() if count == top]
    return _sum(tied) / len(tied)


def _score_table(tasks: Tasks, score_fn: ScoreFn, answer_key: str | None) -> tuple[ScoreTable, list[list[Any]]]:
    """Each rollout's named scores (booleans as 0/1; ``no_answer`` added when ``answer_key`` is set) and answers."""
    table: ScoreTable = []
    answers: list[list[Any]] = []
    for rollouts in tasks:
        task_scores, task_answers = [], []
        for rollout in rollouts:
            scores = {name: int(v) if isinstance(v, bool) else v for name, v in score_fn(rollout).items()}
            if answer_key is not None:
                answer = rollout.get(answer_key)
                task_answers.append(answer)
                scores["no_answer"] = 1 if answer is None else 0
            task_scores.append(scores)
        table.append(task_scores)
        if answer_key is not None:
            answers.append(task_answers)
    return table, answers


def compute_pass_majority_metrics(
    tasks: list[list[dict[str, Any]]],
    score_fn: Any | None = None,
    answer_key: str | None = None,
) -> tuple[dict[str, Any], list[list[dict[str, float]]], list[str], int]:
    """pass@k, pass@1[avg-of-k], majority@k and across-run variance of grouped rollouts.

    ``tasks[i]`` is the list of rollouts (verify responses) of task ``i``. ``score_fn(rollout)`` returns named
    scores (default ``{"accuracy": rollout["reward"]}``). With ``answer_key`` (the field holding the extracted
    answer) majority@k and a ``no_answer`` score are added. For k = 1..max rollouts and each score name:

    - ``pass@{k}/{name}``: the unbiased pass@k for 0/1 scores, the best of the first k otherwise;
    - ``pass@1[avg-of-{k}]/{name}``: the mean of the first k rollouts;
    - ``majority@{k}/{name}`` (with ``answer_key``);
    - ``pass@1[avg-of-{k}]/{name}/std_dev_across_runs`` and ``…/std_err_across_runs`` for k ≥ 2: the spread of
      the per-run means (run i = every task's i-th rollout);
    - ``per_sample_aggregate``: ``{name: [per-run mean, ...]}``.

    All values are percentages. Returns ``(metrics, score table, score names, max k)``; the table and names
    feed ``add_avg_sample_std_dev``.
    """
    if not tasks:
        return {}, [], [], 0
    table, answers = _score_table(tasks, score_fn or _reward_as_accuracy, answer_key)
    max_k = max(len(rollouts) for rollouts in tasks)
    names = sorted({name for task_scores in table for scores in task_scores for name in scores})
    metrics: dict[str, Any] = {}

    for k in range(1, max_k + 1):
        for name in names:
            passes = []
            for task_scores in table:
                values = [s[name] for s in task_scores if name in s]
                if values and k <= len(values):
                    passes.append(_pass_at_k(values, k))
            if passes:
                metrics[f"pass@{k}/{name}"] = 100.0 * _sum(passes) / len(passes)

            averages = []
            for task_scores in table:
                values = [s[name] for s in task_scores[:k] if name in s]
                if values:
                    averages.append(_mean(values))
            if averages:
                metrics[f"pass@1[avg-of-{k}]/{name}"] = 100.0 * _sum(averages) / len(averages)

            if answer_key is not None:
                majorities = [_majority_at_k(a, s, name, k) for s, a in zip(table, answers, strict=True)]
                if majorities:
                    metrics[f"majority@{k}/{name}"] = 100.0 * _sum(majorities) / len(majorities)

    # Run i is every task's i-th rollout: its mean per score, then the spread of those means over runs.
    per_run: dict[str, list[float]] = {}
    for run in range(max_k):
        for name in names:
            run_scores = [s[run][name] for s in table if run < len(s) and name in s[run]]
            if run_scores:
                per_run.setdefault(name, []).append(100.0 * _sum(run_scores) / len(run_scores))
    metrics["per_sample_aggregate"] = {name: per_run[name] for name in names if name in per_run}

    for k in range(2, max_k + 1):
        for name in names:
            run_means = per_run.get(name, [])[:k]
            if len(run_means) >= 2:
                std_dev = _sample_std(run_means)
                prefix = f"pass@1[avg-of-{k}]/{name}"
                metrics[prefix + PassMajorityStat.STD_DEV_ACROSS_RUNS.suffix] = std_dev
                metrics[prefix + PassMajorityStat.STD_ERR_ACROSS_RUNS.suffix] = std_dev / math.sqrt(len(run_means))

    return metrics, table, names, max_k


def add_avg_sample_std_dev(
    metrics: dict[str, Any],
    all_score_dicts: list[list[dict[str, float]]],
    score_names: list[str],
    max_k: int,
) -> None:
    """Add ``pass@1[avg-of-{k}]/{name}/avg_sample_std_dev`` (k ≥ 2) to ``metrics`` in place: the mean over tasks
    of each task's sample standard deviation across its first k rollouts (within-task spread)."""
    for k in range(2, max_k + 1):
        for name in score_names:
            spreads = []
            for task_scores in all_score_dicts:
                values = [s[name] for s in task_scores[:k] if name in s]
                if len(values) >= 2:
                    spreads.append(_sample_std(values))
            if spreads:
                metrics[f"pass@1[avg-of-{k}]/{name}{PassMajorityStat.AVG_SAMPLE_STD_DEV.suffix}"] = _mean(spreads)


def compute_subset_metrics(
    tasks: list[list[dict[str, Any]]],
    subset_key: str,
    score_fn: Any | None = None,
    answer_key: str | None = None,
) -> dict[str, Any]:
    """``compute_pass_majority_metrics`` per subset of tasks, keyed ``"<subset>/<metric>"`` (``easy/pass@1/accuracy``).

    A task's subset is the first non-empty ``subset_key`` among its rollouts (a rollout that never ran may lack
    the field); tasks without one are left out. ``per_sample_aggregate`` is not repeated per subset.
    """
    subsets: dict[Any, Tasks] = {}
    for rollouts in tasks:
        value = next((r[subset_key] for r in rollouts if r.get(subset_key)), None)
        if value:
            subsets.setdefault(value, []).append(rollouts)
    metrics: dict[str, Any] = {}
    for subset, subset_tasks in subsets.items():
        subset_metrics, *_ = compute_pass_majority_metrics(subset_tasks, score_fn=score_fn, answer_key=answer_key)
        metrics.update({f"{subset}/{k}": v for k, v in subset_metrics.items() if k != "per_sample_aggregate"})
    return metrics


def highest_k_metrics(
    agent_metrics: dict[str, Any],
    pattern: str,
    score_names: list[str] | None = None,
    exclude_names: list[str] | None = None,
) -> dict[str, Any]:
    """The entries of ``agent_metrics`` matching ``pattern`` (``{k}`` marks k) at the highest k present.

    ``highest_k_metrics(m, "pass@{k}", score_names=["accuracy"])`` → ``{"pass@32/accuracy": 95.0}``. The
    companion statistics (``…/std_dev_across_runs`` and the like) are never returned; ``score_names`` keeps only
    those score names, ``exclude_names`` drops some.
    """
    regex = re.compile("^" + re.escape(pattern).replace(r"\{k\}", r"(\d+)") + "/(.+)$")
    stats = tuple(stat.value for stat in PassMajorityStat)
    found: list[tuple[int, str]] = []
    for key in agent_metrics:
        match = regex.match(key)
        if match is None:
            continue
        name = match.group(2)
        if name.endswith(stats):
            continue
        if score_names is not None and name not in score_names:
            continue
        if exclude_names is not None and name in exclude_names:
            continue
        found.append((int(match.group(1)), key))
    if not found:
        return {}
    top = max(k for k, _ in found)
    return {key: agent_metrics[key] for k, key in found if k == top}
