"""Process hosting: how a built app is served in processes (one, supervised children, or N workers behind
HAProxy), and the runtime of the environments that need more than the serving loop.

- ``host``: serve a spec with uvicorn (``python -m ngym.server.hosting.host``): one server, several as
  supervised children, or ``--workers N``.
- ``worker``: the app of one worker process (uvicorn's factory, ``app_from_env``).
- ``affinity``: ``--workers N`` for environments whose sessions stay in the process: N workers behind HAProxy,
  each session pinned to one.
- ``haproxy``: the HAProxy binary and configuration for that front.
- ``fork_template``: the serving process prepared as a warm template for the processes an environment forks.
- ``env_loop``: the author's coroutines on an event loop of their own, off the serving loop.
- ``cpu_priority``: CPU priority of the serving process and of the processes its environment starts.

Built on the request pipeline (``ngym.server.pipeline``); nothing here is part of one request's path.
"""
