"""Installed ORS environments: one JSON record each, in ``<ngym prefix>/share/ngym/ors`` (``NGYM_ORS_RECORDS``).

A record is what ngym needs to list and serve the environment without starting it: its name, the module and
class that define it, the interpreter (venv) that runs it, its domain, ORS tools (JSON Schema included), splits
and terminal tool. Beside it, ``<name>/`` holds the environment's own copy of a folder's code (``source/``) and
its example data (``data/example.jsonl``: one row per task).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from typing import Any

from ngym.plugin_api import RecordShelf

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: another folder for the records (tests use one, so they never touch the real prefix)
RECORDS_ENV = "NGYM_ORS_RECORDS"


@dataclass
class Record:
    name: str
    python: str
    source: str  # what the user typed (``ors:...``)
    module: str
    environment: str  # the Environment subclass
    env_name: str  # its ORS name (``Environment.name().lower()``)
    domain: str
    path: str | None = None  # a folder's copy, put first on sys.path; None for a distribution
    distribution: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    terminal_tool: dict[str, Any] | None = None
    splits: list[dict[str, str]] = field(default_factory=list)
    num_tasks: dict[str, int] = field(default_factory=dict)
    description: str = ""
    openreward: str = ""

    def spec(self) -> dict[str, Any]:
        """What ``inner.py`` loads."""
        return {"path": self.path, "module": self.module, "environment": self.environment}


SHELF = RecordShelf(Record, RECORDS_ENV, "ors")
records_dir = SHELF.folder
write = SHELF.write
read = SHELF.read
all_records = SHELF.all
#: the environment's own folder: its ``data/`` (and a folder environment's ``source/``)
folder_of = SHELF.folder_of


def remove(name: str) -> None:
    SHELF.remove(name)
    shutil.rmtree(folder_of(name), ignore_errors=True)
