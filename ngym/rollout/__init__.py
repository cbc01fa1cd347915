"""Rollouts end to end: an agent loop against any OpenAI-compatible model, and an offline replay model.

- ``agent``: one rollout — seed_session, model → tools → model … → verify (NeMo Gym's simple_agent loop).
- ``model_client``: the OpenAI Responses API through the ``openai`` package (imported only here).
- ``runner``: many rollouts with bounded concurrency, JSONL results, ``--resume``, ``/aggregate_metrics``.
- ``ledger``: the rollout ledger (input rows, the resume key, resume, whole-line appends, the metrics body),
  shared with ngym-nemo-gym's collector through ``ngym.plugin_api``.
- ``replay_model``: an OpenAI-Responses-compatible server answering from recorded rollouts or ground truth.
- ``scripted_judge``: the offline judge the replay model can also act as (exact / normalised match).
- ``launch``: start an environment (``ngym run NAME``) or an app on a free port, and stop it.

Nothing here is imported when a resources server starts.
"""
