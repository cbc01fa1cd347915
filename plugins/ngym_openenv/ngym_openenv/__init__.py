"""Serve OpenEnv environments as ngym resources servers (``ngym install openenv:<distribution | folder | URL>``).

See docs/coming-from-openenv.md. Modules: ``install`` (the install flow), ``project`` (the generated
distribution), ``server`` (the resources server an installed environment is), ``wire`` (OpenEnv's ``/ws``
protocol), ``launch`` (starting the environment's own server in its virtualenv), ``reward`` (episode reward
rules), ``catalog`` (``ngym list --available openenv``), ``probe`` (run inside the environment's virtualenv at
install), ``manifest`` (what install learnt), ``errors``.
"""
