"""The server runtime: what runs inside a served environment.

Base classes an author subclasses (``base``, ``resources``), the wire protocol's routes (``routes``) and
models (``protocol/``), the ASGI middleware, per-rollout sessions (``sessions/``), aggregate metrics, the
registration rules a server class must meet (``rules``), and building and serving the app (``app``,
``host``). Nothing here imports the CLI or the tooling (validate, containerize, profile, rollout).
"""
