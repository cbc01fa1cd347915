"""Installed verifiers environments: one JSON record each, in ``<ngym prefix>/share/ngym/verifiers``.

A record is what ngym needs to list and serve the environment without starting it: its name, the module
and interpreter (venv) that serve it, its domain, API, tools (with JSON schemas), reward functions (with
weights) and a few example rows. It lives in ngym's interpreter prefix, beside NeMo Gym's generated
projects, so two ngym installs never see each other's environments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ngym.plugin_api import RecordShelf

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: set to another folder to keep records elsewhere (tests do, so they never touch the real prefix).
RECORDS_ENV = "NGYM_VERIFIERS_RECORDS"


@dataclass
class Record:
    name: str
    module: str
    python: str
    source: str
    distribution: str | None
    domain: str
    api: str  # "v1" (verifiers 0.4 Taskset) | "legacy" (verifiers <= 0.3 load_environment)
    args: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    rewards: list[dict[str, Any]] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)
    description: str = ""
    #: what was installed of it in its venv (``venvs.fingerprint``); "" in records made before it was kept
    fingerprint: str = ""
    #: {Hugging Face dataset name: a local JSON-lines file kept beside the record}: read instead of the Hub
    datasets: dict[str, str] = field(default_factory=dict)


SHELF = RecordShelf(Record, RECORDS_ENV, "verifiers")
records_dir = SHELF.folder
write = SHELF.write
read = SHELF.read
all_records = SHELF.all
remove = SHELF.remove
#: the environment's own folder beside its record (its ``data/``: ``ngym_verifiers.examples``)
folder_of = SHELF.folder_of
