"""Installed verifiers environments: one JSON record each, in ``<ngym prefix>/share/ngym/verifiers``.

A record is what ngym needs to list and serve the environment without starting it: its name, the module
and interpreter (venv) that serve it, its domain, API, tools (with JSON schemas), reward functions (with
weights) and a few example rows. It lives in ngym's interpreter prefix, beside NeMo Gym's generated
projects, so two ngym installs never see each other's environments.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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


def records_dir() -> Path:
    explicit = os.environ.get(RECORDS_ENV)
    return Path(explicit) if explicit else Path(sys.prefix) / "share" / "ngym" / "verifiers"


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
    path = records_dir() / f"{name}.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise KeyError(name) from None
    return Record(**data)


def all_records() -> list[Record]:
    """Every installed record; an unreadable one is skipped (ngym list must still work)."""
    folder = records_dir()
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(Record(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return found


def remove(name: str) -> bool:
    path = records_dir() / f"{name}.json"
    if path.exists():
        path.unlink()
        return True
    return False
