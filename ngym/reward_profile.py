"""``ngym.reward_profile``: the documented name of ``ngym.metrics.reward_profile`` (NeMo Gym's metric helpers),
kept so environments that import it keep working."""

from ngym.metrics.reward_profile import (
    PassMajorityStat,
    add_avg_sample_std_dev,
    compute_pass_majority_metrics,
    compute_subset_metrics,
    highest_k_metrics,
)

__all__ = [
    "PassMajorityStat",
    "add_avg_sample_std_dev",
    "compute_pass_majority_metrics",
    "compute_subset_metrics",
    "highest_k_metrics",
]
