"""Repeat-level metrics and the ``compute_repeat_metrics`` hook give NeMo Gym 0.7.0's numbers: the same verify
responses go through ngym's ``aggregate_metrics`` here and NeMo's own ``compute_aggregate_metrics`` in its venv."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

import pytest

from ngym.metrics.aggregate import aggregate_metrics
from ngym.metrics.repeats import t_quantile

# Hooks by name (a callable cannot cross the process boundary); both sides run this very code. math.fsum rather
# than sum: the built-in sum of floats differs between Python 3.11 (here) and 3.12+ (NeMo Gym's venv).
HOOKS = """
import math


def finance_like(tasks):  # finance_agent_v2: full-run rules on one repeat, names that collide with generic ones
    rewards = [r["reward"] for task in tasks for r in task]
    solved = [max(r["reward"] for r in task) for task in tasks]
    return {"mean/reward": math.fsum(rewards) / len(rewards), "mean/solved_task": math.fsum(solved) / len(solved)}


def scicode_like(tasks):  # scicode: names of its own, one of them not finite in some repeat
    passed = sum(r.get("steps_passed", 0) for task in tasks for r in task)
    total = sum(r.get("steps_total", 0) for task in tasks for r in task)
    odd = len(tasks) % 2 == 1
    return {"subtask_accuracy": passed / total if total else 0.0, "flaky": math.nan if odd else 1.0, "label": "x"}


def full_run(tasks):  # compute_metrics: a full-run value that is not finite vetoes the per-repeat one
    return {"subtask_accuracy": math.inf, "per_task_metrics": []}


HOOKS = {"none": None, "finance_like": finance_like, "scicode_like": scicode_like, "full_run": full_run}
"""

NEMO_SIDE = (
    HOOKS
    + """
import json, sys, warnings
from nemo_gym.reward_profile import compute_aggregate_metrics

warnings.simplefilter("ignore")
out = []
for case in json.load(sys.stdin):
    result = compute_aggregate_metrics(
        case["responses"],
        compute_metrics_fn=HOOKS[case["compute_metrics"]],
        compute_repeat_metrics_fn=HOOKS[case["compute_repeat_metrics"]],
    )
    out.append({"repeat_level_metrics": result.repeat_level_metrics, "agent_metrics": result.agent_metrics})
print(json.dumps(out))
"""
)


def _hooks() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(HOOKS, namespace)  # noqa: S102 - the hooks above, so both sides run the very same code
    return namespace["HOOKS"]


def _responses(rng: random.Random, tasks: int, repeats: int, *, ragged: bool, masked: bool) -> list[dict[str, Any]]:
    responses = []
    for task in range(tasks):
        for repeat in range(repeats):
            if ragged and rng.random() < 0.15:
                continue  # this repeat misses this task
            reward = rng.choice([0.0, 1.0, 1.0, round(rng.random(), 3)])
            response: dict[str, Any] = {
                "_ng_task_index": task,
                "_ng_rollout_index": repeat,
                "reward": reward,
                "correct": reward == 1.0,
                "steps_passed": rng.randint(0, 5),
                "steps_total": 5,
                "judge": "yes",
                "_private_number": 7,
                "response": {"usage": {"input_tokens": rng.randint(10, 900), "output_tokens": rng.randint(1, 300)}},
            }
            if rng.random() < 0.3:
                response["latency_s"] = rng.random() * 10
            if masked and rng.random() < 0.1:
                response["mask_sample"] = True
            elif rng.random() < 0.5:
                response["mask_sample"] = False
            responses.append(response)
    return responses


def _cases() -> list[dict[str, Any]]:
    rng = random.Random(20261123)
    cases = []
    shapes = [
        (1, 3, False, False),
        (4, 1, False, False),
        (5, 2, False, False),
        (12, 4, True, True),
        (40, 5, True, True),
    ]
    shapes += [(150, 3, False, False)]  # past numpy's 128-value pairwise block
    for tasks, repeats, ragged, masked in shapes:
        responses = _responses(rng, tasks, repeats, ragged=ragged, masked=masked)
        for metrics, repeat in [("none", "none"), ("none", "finance_like"), ("full_run", "scicode_like")]:
            cases.append(
                {"responses": responses, "compute_metrics": metrics, "compute_repeat_metrics": repeat, "shape": tasks}
            )
    return cases


def _ngym_side(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    hooks = _hooks()
    out = []
    for case in cases:
        result = aggregate_metrics(
            case["responses"],
            compute_metrics_fn=hooks[case["compute_metrics"]],
            compute_repeat_metrics_fn=hooks[case["compute_repeat_metrics"]],
        )
        out.append(json.loads(json.dumps(result.model_dump())))
    return out


def _repeat_numbers(agent_metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in agent_metrics.items() if "_across_repeats/" in k or k == "num_repeats"}


def _assert_same(mine: Any, theirs: Any, where: str) -> None:
    """Equal to the last bit, except the t-interval bounds (scipy's Student-t quantile vs ours: ~1e-15)."""
    if isinstance(theirs, dict):
        assert isinstance(mine, dict) and mine.keys() == theirs.keys(), f"{where}: {set(mine) ^ set(theirs)}"
        for key in theirs:
            _assert_same(mine[key], theirs[key], f"{where}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(mine, list) and len(mine) == len(theirs), where
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            _assert_same(a, b, f"{where}[{i}]")
    elif "ci_" in where:
        assert mine == pytest.approx(theirs, rel=1e-12, abs=1e-12), where
    else:
        assert mine == theirs and type(mine) is type(theirs), f"{where}: {mine!r} != {theirs!r}"


def test_same_repeat_metrics_as_nemo_gym(run_in_nemo: Callable[..., Any]) -> None:
    cases = _cases()
    nemo = run_in_nemo(NEMO_SIDE, cases, timeout=600)
    ours = _ngym_side(cases)
    for case, theirs, mine in zip(cases, nemo, ours, strict=True):
        where = f"{case['shape']} tasks, hooks {case['compute_metrics']}/{case['compute_repeat_metrics']}"
        _assert_same(mine["repeat_level_metrics"], theirs["repeat_level_metrics"], f"{where}: repeat_level_metrics")
        _assert_same(
            _repeat_numbers(mine["agent_metrics"]), _repeat_numbers(theirs["agent_metrics"]), f"{where}: agent"
        )
    # the cases exercise what they claim: rows, hook numbers that replace generic ones, vetoed ones
    by_hook = {(c["shape"], c["compute_repeat_metrics"]): m for c, m in zip(cases, ours, strict=True)}
    assert len(by_hook[(12, "none")]["repeat_level_metrics"]) == 4
    assert by_hook[(4, "none")]["repeat_level_metrics"] == []
    finance_rows = by_hook[(12, "finance_like")]["repeat_level_metrics"]
    assert all("mean/solved_task" in row for row in finance_rows)
    scicode = by_hook[(40, "scicode_like")]
    assert all("subtask_accuracy" not in row and "flaky" not in row for row in scicode["repeat_level_metrics"])


def test_one_repeat_of_the_hook_by_hand() -> None:
    responses = [
        {"_ng_task_index": t, "_ng_rollout_index": r, "reward": float(t == r)} for t in range(2) for r in range(2)
    ]
    seen: list[list[list[dict[str, Any]]]] = []

    def per_repeat(tasks: list[list[dict[str, Any]]]) -> dict[str, Any]:
        seen.append(tasks)
        return {"accuracy": sum(r["reward"] for task in tasks for r in task) / len(tasks)}

    result = aggregate_metrics(responses, compute_repeat_metrics_fn=per_repeat)
    assert [[r["_ng_task_index"] for r in [task[0] for task in tasks]] for tasks in seen] == [[0, 1], [0, 1]]
    rows = result.repeat_level_metrics
    assert [row["_ng_rollout_index"] for row in rows] == [0, 1]
    assert [row["accuracy"] for row in rows] == [0.5, 0.5]
    assert rows[0]["sample_count"] == 2 and rows[0]["missing_count"] == 0
    assert rows[0]["mean/reward"] == 0.5 and rows[0]["p25/reward"] == 0.25
    agent = result.agent_metrics
    assert agent["mean_across_repeats/accuracy"] == 0.5 and agent["std_across_repeats/accuracy"] == 0.0
    assert agent["ci_low_95_across_repeats/accuracy"] == 0.5  # no spread: the interval is the point
    assert agent["num_repeats"] == 2
    assert not any("_across_repeats/" in name for name in result.key_metrics)


@pytest.mark.parametrize(
    ("df", "expected"),
    # scipy.stats.t.ppf(0.975, df) (scipy 1.18)
    [(1, 12.706204736174694), (2, 4.302652729749462), (3, 3.1824463052837078), (9, 2.262157162798205)]
    + [(29, 2.045229642132703), (149, 1.976013177689192), (10_000, 1.960201239890626)],
)
def test_t_quantile(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, rel=1e-13)
    assert t_quantile(0.025, df) == pytest.approx(-expected, rel=1e-13)
    assert math.isfinite(t_quantile(0.5, df)) and abs(t_quantile(0.5, df)) < 1e-12
