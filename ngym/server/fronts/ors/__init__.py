"""The Open Reward Standard (ORS) front: every ngym environment served as ``openreward.environments.Server`` serves one.

Mounted under ``/ors`` on every server app (``mount.py``), so ORS clients point at ``http://HOST:PORT/ors``
(``OPENREWARD_API_URL`` = ``OPENREWARD_SESSION_URL`` = that URL; ``env_name`` = the environment's name) and
NeMo Gym's wire keeps the root. It is a thin translation, module by module:

- ``tasks``: splits and tasks from the environment's dataset rows, and a row's prompt;
- ``tools``: the environment's tool routes as ORS tool specs (JSON Schema), plus the final-answer tool;
- ``episodes``: an ORS session is one ngym session, seeded with its row by ``POST /seed_session``; each tool
  call runs the tool route and the final answer runs ``/verify``, in process through the whole app (the same
  middleware, session manager, validation and errors as a NeMo Gym agent's calls), with the calls kept as
  the Responses-format trajectory ``/verify`` reads;
- ``trajectory``: that trajectory as the ``response`` NeMo Gym's agent would have sent, and a verify
  answer as an ORS reward (a masked one is no reward, ``null``, never 0.0);
- ``wire``: ORS request bodies and answers; ``sse``: its event-stream framing; ``routes``: the HTTP routes.
"""
