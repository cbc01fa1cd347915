"""The ngym hook plugin: every installed ORS environment is a registered resources server, and
``ngym install ors:<folder | distribution>`` installs one (``ngym.plugin_api.Ecosystem``).

Registered lazily by target (``ngym_ors.installed:<name>``), so ``ngym list`` reads the records and starts
nothing; each with its own folder (``<records>/<name>``, whose ``data/example.jsonl`` ``ngym install`` wrote).
"""

from __future__ import annotations

from ngym.plugin_api import Ecosystem
from ngym_ors import records

ngym_register_resources_servers, ngym_register_install_sources = Ecosystem(
    prefix="ors",
    package="ngym_ors",
    shelf=records.SHELF,
    description="Open Reward Standard environments: a folder with server.py, or a distribution",
    options="module=NAME (the module defining it), environment=CLASS (one of several), max_tasks=N, max_rollouts=N",
).hooks()
