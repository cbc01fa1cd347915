"""Which dataset row an OpenEnv ``reset`` seeds: from its arguments, else the environment's next example row.

A row is kilobytes of JSON (workplace_assistant's: 15 KB, its tools 14 KB of it), and a training run resets with the
same row once per generation of a group. What a reset and its episode's verify send about the row (the seed body,
the observation's prompt and tools, the tools in the verify body) is encoded once per row (``ReadyRow``), and a
reset message seen lately is parsed once (``RepeatedMessages``): both kept for a bounded number of rows.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic_core

from ngym.server.pipeline.intake import parse_json

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


#: Rows sent whole in a reset whose ``ReadyRow`` is kept, and reset messages kept parsed (the latest ones).
KEPT_ROWS = 64
#: Reset messages of this many characters or more are kept parsed (a step or a reset naming no row is shorter), and
#: of at most ``MESSAGE_MAX_CHARS``. A row's message kept also keeps its ``ReadyRow``: the same parsed row object.
MESSAGE_MIN_CHARS = 256
MESSAGE_MAX_CHARS = 512 * 1024


class ReadyRow:
    """A dataset row as a reset seeds it, with what every reset and verify of it sends encoded once:
    ``seed_body`` (the row and the reset's indices), ``observation_json`` (the reset's observation: the prompt,
    the tools offered, then what varies) and ``tools`` (the ``tools`` of the episode's Responses trajectory)."""

    __slots__ = ("_body", "_head", "declared", "row", "tools")

    def __init__(self, row: dict[str, Any], declared: set[str] | None, available: list[dict[str, Any]]) -> None:
        self.row = row
        self.declared = frozenset(declared) if declared is not None else None
        params = row.get("responses_create_params") or {}
        self.tools = pydantic_core.to_json(params.get("tools") or [])
        self._body = pydantic_core.to_json(row)
        prompt_json = pydantic_core.to_json(self.prompt)
        self._head = b'{"prompt":' + prompt_json + b',"available_tools":' + pydantic_core.to_json(available)

    @property
    def prompt(self) -> Any:
        """The observation's ``prompt``."""
        prompt = (self.row.get("responses_create_params") or {}).get("input")
        return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt

    def seed_body(self, indices: dict[str, int]) -> bytes:
        """``{**row, **indices}`` as JSON (the seed's body), the row's part encoded once."""
        if any(key in self.row for key in indices):
            return pydantic_core.to_json({**self.row, **indices})
        tail = pydantic_core.to_json(indices)[1:]
        return self._body[:-1] + (b"," if len(self._body) > 2 else b"") + tail

    def observation_json(self, rest: dict[str, Any]) -> bytes:
        """``{"prompt": ..., "available_tools": ..., **rest}`` as JSON, its first two fields encoded once."""
        return self._head + b"," + pydantic_core.to_json(rest)[1:]


class RepeatedMessages:
    """The reset messages of a connection's or another's recent episodes, parsed once: ``parse(raw)`` gives the
    same parsed object for the same text (the latest ``KEPT_ROWS``, of ``MESSAGE_MIN_CHARS`` to
    ``MESSAGE_MAX_CHARS`` characters). What it gives is shared: read it, never change it."""

    def __init__(self) -> None:
        self._known: dict[str, Any] = {}

    def parse(self, raw: str) -> Any:
        """``raw`` parsed (``ValueError`` when it is not JSON)."""
        if not MESSAGE_MIN_CHARS <= len(raw) <= MESSAGE_MAX_CHARS:
            return parse_json(raw)
        found = self._known.get(raw)
        if found is not None:
            return found
        message = parse_json(raw)
        if type(message) is dict and message.get("type") == "reset":
            if len(self._known) >= KEPT_ROWS:
                del self._known[next(iter(self._known))]
            self._known[raw] = message
        return message


#: What a front says about a row: the names of the tools it declares (None: any route) and the tools a reset
#: offers.
Describe = Callable[[dict[str, Any]], tuple["set[str] | None", list[dict[str, Any]]]]


class RowPicker:
    """The rows an environment ships and the choice a ``reset``'s arguments make among them."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self._next = itertools.count()
        self._ready: dict[int, ReadyRow] = {}  # of ``rows``, by index
        self._given: dict[int, tuple[dict[str, Any], ReadyRow]] = {}  # rows sent whole, by id (the object kept)

    def pick_ready(self, arguments: dict[str, Any], describe: Describe) -> tuple[ReadyRow, int | None]:
        """``pick``, the row as a ``ReadyRow`` (made with ``describe``; kept for the environment's rows and the
        latest ``KEPT_ROWS`` rows sent whole, by the object sent: ``RepeatedMessages`` gives the same one for the
        same message)."""
        given = arguments.get("row")
        if given is not None:
            kept = self._given.get(id(given))
            if kept is not None and kept[0] is given:
                return kept[1], _index(arguments.get("task_index"))
            row, index = self.pick(arguments)
            ready = ReadyRow(row, *describe(row))
            if len(self._given) >= KEPT_ROWS:
                del self._given[next(iter(self._given))]
            self._given[id(given)] = (given, ready)
            return ready, index
        row, index = self.pick(arguments)
        assert index is not None  # a row of ``rows``
        found = self._ready.get(index)
        if found is None or found.row is not row:
            found = self._ready[index] = ReadyRow(row, *describe(row))
        return found, index

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
