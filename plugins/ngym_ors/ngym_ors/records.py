"""Installed ORS environments: one JSON record each, in ``<ngym prefix>/share/ngym/ors`` (``NGYM_ORS_RECORDS``).

A record is what ngym needs to list and serve the environment without starting it: its name, the module and
class that define it, the interpreter (venv) that runs it, its domain, ORS tools (JSON Schema included), splits
and terminal tool. Beside it, ``<name>/`` holds the environment's own copy of a folder's code (``source/``) and
its example data (``data/example.jsonl``: one row per task).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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


def records_dir() -> Path:
    explicit = os.environ.get(RECORDS_ENV)
    return Path(explicit) if explicit else Path(sys.prefix) / "share" / "ngym" / "ors"


def folder_of(name: str) -> Path:
    """The environment's own folder: its ``data/`` (and a folder environment's ``source/``)."""
    return records_dir() / name


def write(record: Record) -> Path:
    folder = records_dir()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".record-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(asdict(record), fh, indent=2)
    path = folder / f"{record.name}.json"
    os.replace(tmp, path)
    return path


def read(name: str) -> Record:
    """The record of environment ``name`` (KeyError when it is not installed)."""
    try:
        data = json.loads((records_dir() / f"{name}.json").read_text())
    except FileNotFoundError:
        raise KeyError(name) from None
    return Record(**data)


def all_records() -> list[Record]:
    """Every installed record; an unreadable one is skipped (``ngym list`` must still work)."""
    folder = records_dir()
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(Record(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return found


def remove(name: str) -> None:
    (records_dir() / f"{name}.json").unlink(missing_ok=True)
    shutil.rmtree(folder_of(name), ignore_errors=True)
