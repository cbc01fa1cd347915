"""Protocol fronts: other protocols served beside the resources-server routes, by the same server.

A front is a thin translation of a protocol's requests into the same session manager
(``ngym.server.sessions``) and the environment's own methods (its tools, ``seed_session``, ``verify``). It has
no sessions and no reward path of its own: a rollout served through a front is kept, scored and masked
exactly as one served through the standard routes (``ngym.server.pipeline.routes``).

- ``mcp``: ``expose_tools_over_mcp``: the environment's tool routes over MCP (streamable HTTP at ``/mcp``),
  inside each rollout's session.
- ``ors/``: the Open Reward Standard (``/ors``, and the ``openreward`` SDK's requests at the root), mounted on
  every app and imported on its first request.
- ``openenv/``: OpenEnv's protocol, mounted under ``/openenv`` on every app and built on its first request.

Fronts are built on the request pipeline (``ngym.server.pipeline``), which imports none of them: ``ngym.server``
registers each as an app extension (``pipeline.extensions``) that ``build_app`` applies: ORS and OpenEnv on every
app (their light mount modules only), MCP when the config asks for it (``expose_tools_over_mcp``).
"""
