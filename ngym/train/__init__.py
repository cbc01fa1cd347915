"""Train on ngym environments with the trainers people use: each trainer's own extension point, client side.

One module per trainer (``ngym.train.trl``, ...), sharing :mod:`ngym.train.wire` (one rollout's session over NeMo
Gym's wire) and :mod:`ngym.train.rows` (dataset rows, tool schemas, trajectories). These modules import only the
standard library and ``httpx``, so they run in a trainer's own virtualenv with none of ngym's server stack:
see docs/training.md.
"""
