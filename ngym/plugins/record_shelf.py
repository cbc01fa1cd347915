"""Installed-environment records of an ecosystem plugin: one JSON file per environment, in one folder.

``RecordShelf(Record, "NGYM_ORS_RECORDS", "ors")`` keeps dataclass ``Record`` instances (with a ``name`` field) in
``<ngym prefix>/share/ngym/ors`` (or the folder the environment variable names: tests use one), written atomically,
read back by name, listed (an unreadable file skipped, so ``ngym list`` still works) and removed.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Generic, TypeVar

R = TypeVar("R")


class RecordShelf(Generic[R]):
    """The records of one plugin's installed environments (``record_type``: a dataclass with a ``name``)."""

    def __init__(self, record_type: type[R], folder_env: str, kind: str) -> None:
        self.record_type, self.folder_env, self.kind = record_type, folder_env, kind

    def folder(self) -> Path:
        explicit = os.environ.get(self.folder_env)
        return Path(explicit) if explicit else Path(sys.prefix) / "share" / "ngym" / self.kind

    def folder_of(self, name: str) -> Path:
        """Environment ``name``'s own folder beside its record (its ``data/``: what ``ngym install`` made)."""
        return self.folder() / name

    def write(self, record: R) -> Path:
        """Write ``record`` atomically (a reader never sees half a file); its path."""
        folder = self.folder()
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".record-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump(asdict(record), fh, indent=2)  # type: ignore[call-overload]  # R is a dataclass
        path = folder / f"{getattr(record, 'name')}.json"  # noqa: B009 - R is any dataclass with a name
        os.replace(tmp, path)
        return path

    def read(self, name: str) -> R:
        """The record of environment ``name`` (KeyError when it is not installed)."""
        try:
            data: dict[str, Any] = json.loads((self.folder() / f"{name}.json").read_text())
        except FileNotFoundError:
            raise KeyError(name) from None
        return self.record_type(**data)

    def all(self) -> list[R]:
        """Every installed record; an unreadable one is skipped (``ngym list`` must still work)."""
        folder = self.folder()
        found = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                found.append(self.record_type(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError):
                continue
        return found

    def remove(self, name: str) -> bool:
        """Forget environment ``name``; False when it had no record."""
        path = self.folder() / f"{name}.json"
        if not path.exists():
            return False
        path.unlink(missing_ok=True)
        return True
