"""Statistics of verify responses, apart from the HTTP runtime that serves them.

- ``ngym.metrics.aggregate``: what ``/aggregate_metrics`` answers (per task and overall, masked samples out, the
  ``compute_metrics`` / ``get_key_metrics`` hooks);
- ``ngym.metrics.repeats``: per-repeat rows and across-repeat summaries (the ``compute_repeat_metrics`` hook);
- ``ngym.metrics.reward_profile``: NeMo Gym's pass@k / majority@k / subset helpers for those hooks (also
  importable as ``ngym.reward_profile``).

Pure standard library arithmetic (the wire model ``AggregateMetrics`` aside), with NeMo Gym 0.7.0's numbers.
"""
