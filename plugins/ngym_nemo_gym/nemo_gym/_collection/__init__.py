"""ngym's implementation of NeMo Gym's rollout collection (``ng_collect_rollouts``, ``gym eval aggregate``).

Not a NeMo Gym module: NeMo's names for it are in :mod:`nemo_gym.rollout_collection`, which re-exports from here.
The files it reads and writes, the resume key and the append are ngym's rollout ledger (``ngym.plugin_api``),
shared with ``ngym rollout``; what is NeMo's alone (the failures sidecar, attempts, routing, shards) is here.

- ``config``: the collection and aggregation configs; ``preprocess``: input rows to materialized rollouts;
- ``routing``: which agent and environment server a row goes to; ``dispatch``: sending rows to ``/run``;
- ``records``: row keys, failure rows and resume rules; ``runner``: one collection, start to end;
- ``metrics``: what is scored and by which server; ``shards``: aggregating shards; ``perf``: ``ng_perf``.
"""
