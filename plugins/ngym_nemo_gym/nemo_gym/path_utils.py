"""Where rollout collection writes the files that go beside a rollouts file (NeMo Gym's ``nemo_gym.path_utils``).

Writers and readers derive them from the rollouts file the same way: ``results/rollouts.jsonl`` →
``results/rollouts_failures.jsonl``, ``..._materialized_inputs.jsonl``, ``..._aggregate_metrics.json``.
"""

from __future__ import annotations

from pathlib import Path


def failures_path_for(output_fpath: Path) -> Path:
    """The rows that failed for good: ``<stem>_failures.jsonl`` beside the rollouts file."""
    return output_fpath.with_name(f"{output_fpath.stem}_failures.jsonl")


def materialized_path_for(output_fpath: Path) -> Path:
    """The inputs as sent (after prompt templating): ``<stem>_materialized_inputs.jsonl``."""
    return output_fpath.with_name(f"{output_fpath.stem}_materialized_inputs.jsonl")


def aggregate_metrics_path_for(output_fpath: Path) -> Path:
    """The ``/aggregate_metrics`` answer for the run: ``<stem>_aggregate_metrics.json``."""
    return output_fpath.with_name(f"{output_fpath.stem}_aggregate_metrics.json")
