"""A fleet: many environments, each isolated and behind one stable URL, brought up from one file.

``ngym up fleet.yaml`` reads a :class:`~ngym.fleet.spec.FleetSpec`, starts every environment as one
``ngym run NAME --workers N`` unit (in its own virtualenv when it names requirements), starts any NeMo Gym
servers the file lists (agents, models) the way NeMo Gym's ``gym env start`` does, and serves a NeMo-shaped
global config from a head server, as NeMo Gym's own head server does, so NeMo Gym's collector and agents find
every server by name. ``ngym status`` and ``ngym down`` read the state ``up`` wrote.

Modules, one job each: ``spec`` (the file), ``isolation`` (per-environment virtualenvs), ``global_config``
(the NeMo-shaped dict), ``head`` (the head server), ``local`` (the local-process engine), ``compose`` (the
Docker Compose engine), ``state`` (what ``up`` leaves for ``status``/``down``), ``status`` (health, sessions,
rates).
"""
