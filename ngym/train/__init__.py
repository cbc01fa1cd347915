"""Train on ngym environments with the trainers people use, each through its own extension point (docs/training.md).

One module per trainer (``ngym.train.trl``, ``ngym.train.verl``, ``ngym.train.skyrl``, ...); the client side imports
only the standard library and ``httpx`` besides the trainer, so it runs in a trainer's own virtualenv.
"""
