"""Which dataset row an OpenEnv ``reset`` seeds: from its arguments, else the environment's next example row."""

from __future__ import annotations

import inspect
import itertools
import json
import os
from pathlib import Path
from typing import Any

#: Where an environment keeps its dataset rows (the example-data convention every environment follows).
EXAMPLE_ROWS = Path("data") / "example.jsonl"
#: Keys of a recorded rollout line that are not part of its dataset row.
RECORDED_KEYS = ("response", "reward")


class RowError(ValueError):
    """A reset that names no usable row (a 4xx, said plainly)."""


def example_rows_file(server_class: type) -> Path | None:
    """The ``data/example.jsonl`` of an environment: in its data folder (``data_folder()``, else beside its class's
    file) or one folder up, else in the directory the server runs in (an installed NeMo Gym environment runs inside
    its folder)."""
    given = getattr(server_class, "data_folder", None)  # SimpleResourcesServer's: installed environments' own folder
    here = given() if callable(given) else _class_folder(server_class)
    folders = [here, here.parent] if here is not None else []
    for folder in [*folders, Path(os.getcwd())]:
        candidate = folder / EXAMPLE_ROWS
        if candidate.is_file():
            return candidate
    return None


def _class_folder(server_class: type) -> Path | None:
    try:
        return Path(inspect.getfile(server_class)).resolve().parent
    except (TypeError, OSError):
        return None


def read_rows(path: Path | None) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file, as dataset rows (a recorded rollout's ``response``/``reward`` dropped)."""
    if path is None:
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            if isinstance(item, dict):
                rows.append({k: v for k, v in item.items() if k not in RECORDED_KEYS})
    return rows


class RowPicker:
    """The rows an environment ships and the choice a ``reset``'s arguments make among them."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self._next = itertools.count()

    def pick(self, arguments: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
        """``(row, its index or None)``: ``row`` given whole, ``task_index``, ``seed`` (modulo the row count),
        else the next row in turn."""
        given = arguments.get("row")
        if given is not None:
            if not isinstance(given, dict) or not isinstance(given.get("responses_create_params"), dict):
                raise RowError("reset's row must be a dataset row: an object with responses_create_params")
            return {k: v for k, v in given.items() if k not in RECORDED_KEYS}, _index(arguments.get("task_index"))
        if not self.rows:
            raise RowError("this environment ships no data/example.jsonl: pass the dataset row as reset(row={...})")
        index = _index(arguments.get("task_index"))
        if index is not None:
            if not 0 <= index < len(self.rows):
                raise RowError(f"task_index {index} is out of range: this environment has {len(self.rows)} rows")
            return self.rows[index], index
        seed = _index(arguments.get("seed"))
        index = seed % len(self.rows) if seed is not None else next(self._next) % len(self.rows)
        return self.rows[index], index


def _index(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RowError(f"expected an integer, got {value!r}")
    return value
