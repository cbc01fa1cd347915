"""Scoring a rollout as WorkBench's evaluation does: replay the prediction and the ground truth on fresh databases
(``replay``) and compare the five states (``tables.tables_equal``); 1.0 when they are the same.

A ground truth that cannot be replayed (a call raises or is refused) never scores 1.0: :class:`Verdict` names the
problem in ``ground_truth_problems``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .replay import check_ground_truth, replay
from .tables import Table, tables_equal
from .workspace import STATE_TABLES, WorkBenchData, Workspace


def differing_tables(a: Workspace, b: Workspace) -> list[str]:
    """Names of the compared states that differ between two workspaces (empty when WorkBench says equal)."""
    ta, tb = a.state_tables(), b.state_tables()
    return [name for name in STATE_TABLES if not _same(ta[name], tb[name])]


def _same(x: Table, y: Table) -> bool:
    return x is y or tables_equal(x, y)


@dataclass
class Verdict:
    """WorkBench's verdict on one prediction, plus diagnostics."""

    reward: float
    differing_tables: list[str]
    predicted_calls: int
    predicted_failed: list[tuple[int, str, str]]
    ground_truth_failed: list[tuple[int, str, str]]
    ground_truth_refused: list[tuple[int, str, str]] = field(default_factory=list)
    ground_truth_missing_ids: list[str] = field(default_factory=list)

    @property
    def correct(self) -> bool:
        return self.reward == 1.0

    @property
    def ground_truth_problems(self) -> list[tuple[int, str, str]]:
        """Ground-truth calls that raised or were refused, in call order: when any, the reward is not valid."""
        return sorted(self.ground_truth_failed + self.ground_truth_refused)


def score(
    data: WorkBenchData,
    predicted: Iterable[Any],
    ground_truth: Iterable[Any],
    *,
    error: str = "",
    workbench_strings: bool = True,
) -> Verdict:
    """WorkBench's ``is_correct``: 1.0 when replaying ``predicted`` leaves the same five states as ``ground_truth``.

    A ground truth that cannot be replayed (a call raises or is refused, see :func:`check_ground_truth`) never
    scores 1.0: the reward is 0.0 and ``Verdict.ground_truth_problems`` says why; callers must not use it as a
    measurement. ``error`` is WorkBench's per-query runner error (context window exceeded, iteration limit):
    any non-empty value makes the prediction wrong, as in WorkBench.
    """
    pred = replay(data, predicted, workbench_strings=workbench_strings, run_reads=False)
    gold = check_ground_truth(data, ground_truth, workbench_strings=workbench_strings)
    diff = differing_tables(pred.workspace, gold.workspace)
    reward = 1.0 if not diff and not error and not (gold.failed or gold.refused) else 0.0
    return Verdict(reward, diff, pred.calls, pred.failed, gold.failed, gold.refused, gold.missing_ids)


def changes_state(data: WorkBenchData, actions: Iterable[Any], *, workbench_strings: bool = True) -> bool:
    """True when replaying ``actions`` leaves a compared state different from the initial one."""
    after = replay(data, actions, workbench_strings=workbench_strings, run_reads=False).workspace
    return bool(differing_tables(after, data.new_workspace()))
