"""Protocol fronts: other clients' protocols served over the same session manager and the environment's own routes.

Each front lives in a package of its own here and is mounted on every server app under a path of its own
(``/openenv``: OpenEnv's protocol), imported on its first request, so a server whose clients speak NeMo Gym's
wire never loads it.
"""
