"""ngym.reward_profile gives NeMo Gym 0.7.0's numbers: each helper runs on the same inputs here and, in a
subprocess, as NeMo's own function inside the NeMo Gym venv; the results must be equal to the last bit."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from ngym import reward_profile

# One runner, run by both sides: here on ngym.reward_profile, in NeMo Gym's venv on its own module (a callable
# cannot cross the process boundary, so score functions are named).
RUNNER = """
import json

SCORE_FNS = {
    "default": None,
    "two_scores": lambda r: {"accuracy": r["reward"], "judge": r["judge_correct"]},
    "continuous": lambda r: {"quality": r["quality"]},
}


def run(rp, cases):
    out = []
    for case in cases:
        fn, kwargs = case["fn"], dict(case["kwargs"])
        if "score_fn" in kwargs:
            kwargs["score_fn"] = SCORE_FNS[kwargs["score_fn"]]
        if fn == "add_avg_sample_std_dev":
            metrics, table, names, max_k = rp.compute_pass_majority_metrics(**kwargs)
            rp.add_avg_sample_std_dev(metrics, table, names, max_k)
            out.append(metrics)
        elif fn == "compute_pass_majority_metrics":
            out.append(list(rp.compute_pass_majority_metrics(**kwargs)))
        else:
            out.append(getattr(rp, fn)(**kwargs))
    return json.loads(json.dumps(out))
"""
NEMO_SIDE = (
    RUNNER
    + "import sys\nfrom nemo_gym import reward_profile\nprint(json.dumps(run(reward_profile, json.load(sys.stdin))))\n"
)


def _ngym_side(cases: list[dict[str, Any]]) -> list[Any]:
    namespace: dict[str, Any] = {}
    exec(RUNNER, namespace)  # noqa: S102 - the runner above, so both sides run the very same code
    return namespace["run"](reward_profile, cases)


def _tasks(rng: random.Random, n_tasks: int, max_rollouts: int, *, ragged: bool) -> list[list[dict[str, Any]]]:
    tasks = []
    for task in range(n_tasks):
        n = rng.randint(1, max_rollouts) if ragged else max_rollouts
        difficulty = rng.choice(["easy", "medium", "hard", ""])
        rollouts = []
        for rollout in range(n):
            answer = rng.choice(["42", "41", "7", None])
            rollouts.append(
                {
                    "_ng_task_index": task,
                    "_ng_rollout_index": rollout,
                    "reward": float(answer == "42") if rng.random() < 0.9 else rng.choice([0.0, 1.0]),
                    "judge_correct": rng.random() < 0.5,
                    "quality": round(rng.random(), 3),
                    "extracted_answer": answer,
                    "difficulty": difficulty if rollout else rng.choice([difficulty, None]),
                }
            )
        tasks.append(rollouts)
    return tasks


def _cases() -> list[dict[str, Any]]:
    rng = random.Random(20260512)
    cases: list[dict[str, Any]] = [{"fn": "compute_pass_majority_metrics", "kwargs": {"tasks": []}}]
    for n_tasks, max_rollouts, ragged in [(1, 1, False), (5, 4, False), (12, 8, True), (30, 16, False)]:
        tasks = _tasks(rng, n_tasks, max_rollouts, ragged=ragged)
        cases += [
            {"fn": "compute_pass_majority_metrics", "kwargs": {"tasks": tasks}},
            {"fn": "compute_pass_majority_metrics", "kwargs": {"tasks": tasks, "answer_key": "extracted_answer"}},
            {
                "fn": "compute_pass_majority_metrics",
                "kwargs": {"tasks": tasks, "score_fn": "two_scores", "answer_key": "extracted_answer"},
            },
            {"fn": "compute_pass_majority_metrics", "kwargs": {"tasks": tasks, "score_fn": "continuous"}},
            {"fn": "add_avg_sample_std_dev", "kwargs": {"tasks": tasks, "answer_key": "extracted_answer"}},
            {"fn": "add_avg_sample_std_dev", "kwargs": {"tasks": tasks, "score_fn": "continuous"}},
            {"fn": "compute_subset_metrics", "kwargs": {"tasks": tasks, "subset_key": "difficulty"}},
            {
                "fn": "compute_subset_metrics",
                "kwargs": {"tasks": tasks, "subset_key": "difficulty", "answer_key": "extracted_answer"},
            },
        ]
        metrics, *_ = reward_profile.compute_pass_majority_metrics(tasks, answer_key="extracted_answer")
        metrics.pop("per_sample_aggregate")
        for pattern, names, exclude in [
            ("pass@{k}", None, None),
            ("pass@{k}", ["accuracy"], None),
            ("pass@1[avg-of-{k}]", None, ["no_answer"]),
            ("majority@{k}", ["accuracy", "no_answer"], None),
            ("nothing@{k}", None, None),
        ]:
            kwargs = {"agent_metrics": metrics, "pattern": pattern, "score_names": names, "exclude_names": exclude}
            cases.append({"fn": "highest_k_metrics", "kwargs": kwargs})
    return cases


def test_same_numbers_as_nemo_gym(run_in_nemo: Callable[..., Any]) -> None:
    cases = _cases()
    nemo = run_in_nemo(NEMO_SIDE, cases, timeout=300)
    ours = _ngym_side(cases)
    assert len(nemo) == len(ours) == len(cases)
    for case, theirs, mine in zip(cases, nemo, ours, strict=True):
        assert mine == theirs, f"{case['fn']} differs from NeMo Gym's"


def test_pass_at_k_by_hand() -> None:
    # Task 0: 1 of 4 correct; task 1: all correct. pass@1 = (1/4 + 1) / 2, pass@2 = (1 - C(3,2)/C(4,2) + 1) / 2.
    tasks = [[{"reward": r} for r in (1.0, 0.0, 0.0, 0.0)], [{"reward": 1.0}] * 4]
    metrics, _, names, max_k = reward_profile.compute_pass_majority_metrics(tasks)
    assert names == ["accuracy"] and max_k == 4
    assert metrics["pass@1/accuracy"] == pytest.approx(62.5)
    assert metrics["pass@2/accuracy"] == pytest.approx(75.0)
    assert metrics["pass@4/accuracy"] == 100.0
    assert metrics["per_sample_aggregate"] == {"accuracy": [100.0, 50.0, 50.0, 50.0]}
    assert reward_profile.highest_k_metrics(metrics, "pass@{k}") == {"pass@4/accuracy": 100.0}


def test_majority_vote_ties_are_averaged() -> None:
    rollouts = [
        {"reward": 1.0, "answer": "a"},
        {"reward": 0.0, "answer": "b"},
        {"reward": 0.0, "answer": None},
    ]
    metrics, *_ = reward_profile.compute_pass_majority_metrics([rollouts], answer_key="answer")
    assert metrics["majority@2/accuracy"] == 50.0  # "a" (1.0) and "b" (0.0) tie
    assert metrics["pass@1/no_answer"] == pytest.approx(100 / 3)
