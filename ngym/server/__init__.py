"""The server runtime: what runs inside a served environment.

- ``pipeline/``: the request pipeline of one resources server (app building, the base classes an author
  subclasses, middleware, body intake, the standard routes, registration rules).
- ``sessions/``: per-rollout sessions (cookies, stores, the manager that binds requests to them).
- ``protocol/``: the wire models (OpenAI Responses types, route bodies, failure kinds).
- ``hosting/``: serving an app in processes (uvicorn, workers behind HAProxy, the environment loop, the fork
  template, CPU priority).
- ``fronts/``: other protocols served beside the pipeline (MCP; ORS and OpenEnv's).

Nothing here imports the CLI or the tooling (validate, containerize, profile, rollout).
"""
