"""The ngym hook plugin: every installed verifiers environment is a registered resources server, and
``ngym install verifiers:...`` installs one (``ngym.plugin_api.Ecosystem``).

Registered lazily by target (``ngym_verifiers.installed:<name>``), so ``ngym list`` reads the records and
imports nothing of the environment; the class is made when the server is used. Each is registered with its
own folder (``<records>/<name>``, whose ``data/`` ``ngym install`` wrote: ``ngym_verifiers.examples``).
"""

from __future__ import annotations

from ngym.plugin_api import Ecosystem
from ngym_verifiers import records

ngym_register_resources_servers, ngym_register_install_sources = Ecosystem(
    prefix="verifiers",
    package="ngym_verifiers",
    shelf=records.SHELF,
    available="ngym_verifiers.catalog:available",
    description="verifiers environments: a 0.4 taskset or a load_environment module, folder or distribution",
    options="an argument of load_environment (its value read as JSON when it parses); dataset:NAME=FILE.jsonl",
).hooks()
