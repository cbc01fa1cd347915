"""The request pipeline of one resources server: everything a request passes through, from the socket to an
environment's method and back, and the base classes an author subclasses.

One request's path: ``http_protocol`` (uvicorn's protocol: header deadline and size) → ``middleware`` (the
session bound from the cookie, saved and closed afterwards) → ``request_limits`` (body size, read deadline) →
a route class of ``routing`` → ``intake`` (the body read and validated) → ``routes`` (the standard routes: seed,
verify, close, health) → the environment's method → back through ``routing``'s one response path.

- ``app``: a serve spec (class target + config) to a validated server and its FastAPI app.
- ``extensions``: where hosting and the protocol fronts plug into a built app (registered app extensions, the
  placement of the author's coroutines); the pipeline imports neither.
- ``base``, ``resources``: ``BaseServer``/``SimpleServer`` and ``SimpleResourcesServer``, the classes an author
  subclasses.
- ``middleware``: the one pure-ASGI middleware (prefix, session binding, cookie, error guard, 503s).
- ``request_limits``, ``http_protocol``: what one client may cost (413/408, 431).
- ``intake``: how every route reads a body (strict JSON, 400/422, bounded error bodies).
- ``routing``: the route classes (the direct body road, request-only routes) and the one response path.
- ``routes``: the standard routes, judge failures, a lost session's masked verify.
- ``rules``: the registration rules a server class must meet.
- ``traffic``, ``provenance``: what ``/health`` reports (request counters, the providing distribution).

Sessions (``ngym.server.sessions``) and the wire models (``ngym.server.protocol``) sit beside it. Process
hosting (``ngym.server.hosting``) and the protocol fronts (``ngym.server.fronts``) are built on it and plug into
it through ``extensions``.
"""
