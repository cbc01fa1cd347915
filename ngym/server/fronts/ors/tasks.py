"""An environment's ORS splits and tasks: its dataset rows, read once, and the prompt of a row.

Where the rows come from, first found wins:

1. ``ors_tasks`` in the environment's config (``{split: path.jsonl}``), or ``NGYM_ORS_TASKS``
   (``train=/data/train.jsonl,test=/data/test.jsonl``): point the front at any JSONL of dataset rows;
2. the config's ``datasets`` list (NeMo Gym's: ``{name, type, jsonl_fpath}``), each file that exists;
3. the environment's ``data/example.jsonl`` (ngym's convention, ``ngym.examples``), as split ``example``.

Relative paths are relative to the environment's folder (where its class is defined), then to the directory
the server runs in. A task is the row itself: ``task_spec`` is the JSON object ``/seed_session`` is sent.
"""

from __future__ import annotations

import inspect
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ngym.errors import ConfigError
from ngym.jsonl import read_jsonl

if TYPE_CHECKING:
    from ngym.server.pipeline.resources import SimpleResourcesServer

log = logging.getLogger("ngym.ors")

#: ngym's example-data convention (``ngym.examples.EXAMPLE_ROWS``; the server runtime does not import the tooling).
EXAMPLE_ROWS = "example.jsonl"
TASKS_ENV = "NGYM_ORS_TASKS"
CONFIG_KEY = "ors_tasks"
_SPLIT_TYPES = {"train": "train", "validation": "validation", "test": "test"}


@dataclass
class Split:
    name: str
    type: str
    path: Path
    _rows: list[dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows, read on first use (a config error if the file is not JSONL)."""
        if self._rows is None:
            self._rows = read_jsonl(self.path, what="ORS split file")
        return self._rows

    def as_wire(self) -> dict[str, str]:
        return {"name": self.name, "type": self.type}


def split_type(name: str, declared: str | None = None) -> str:
    """ORS knows three split types; anything else (NeMo Gym's ``example``) is served as ``validation``."""
    return _SPLIT_TYPES.get(declared or "", _SPLIT_TYPES.get(name, "validation"))


def environment_folder(server: SimpleResourcesServer) -> Path | None:
    try:
        return Path(inspect.getfile(type(server))).resolve().parent
    except (TypeError, OSError):
        return None


def _resolve(path: str, folder: Path | None) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        return candidate
    if folder is not None and (folder / candidate).is_file():
        return folder / candidate
    return Path.cwd() / candidate


def _parse_mapping(text: str) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, eq, path = item.partition("=")
        if not eq or not name.strip() or not path.strip():
            raise ConfigError(f"{TASKS_ENV}: expected split=path.jsonl[,split=path.jsonl], got {item!r}")
        mapping[name.strip()] = path.strip()
    return mapping


def discover_splits(server: SimpleResourcesServer) -> list[Split]:
    """The environment's splits, in the order of the first source that names any (see the module docstring)."""
    folder = environment_folder(server)
    extra = server.config.model_extra or {}
    given = extra.get(CONFIG_KEY) or (_parse_mapping(os.environ[TASKS_ENV]) if os.environ.get(TASKS_ENV) else None)
    if given:
        if not isinstance(given, dict):
            raise ConfigError(f"{CONFIG_KEY} must map split names to JSONL paths, got {type(given).__name__}")
        return [Split(str(name), split_type(str(name)), _resolve(str(path), folder)) for name, path in given.items()]
    splits: list[Split] = []
    datasets = extra.get("datasets")
    for entry in datasets if isinstance(datasets, list) else []:
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("jsonl_fpath"):
            continue
        path = _resolve(str(entry["jsonl_fpath"]), folder)
        if path.is_file() and all(s.name != entry["name"] for s in splits):
            splits.append(Split(str(entry["name"]), split_type(str(entry["name"]), entry.get("type")), path))
        elif not path.is_file():
            log.info("ORS: dataset %s (%s) is not on disk; not served as a split", entry["name"], path)
    if not splits and folder is not None and (folder / "data" / EXAMPLE_ROWS).is_file():
        splits.append(Split("example", split_type("example"), folder / "data" / EXAMPLE_ROWS))
    return splits


def _text_of(content: Any) -> str:
    """A Responses/Chat message's content as text (string, or the text parts of a list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def prompt_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's ``responses_create_params.input`` as ORS messages (role + text blocks; ``developer`` is
    ``system``), with the row's ``instructions`` first as a system message. Items that are not messages (a
    recorded function call in a multi-turn prompt) are left out: ORS prompts are text."""
    params = row.get("responses_create_params") or {}
    given = params.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given if isinstance(given, list) else []
    messages: list[dict[str, Any]] = []
    if isinstance(params.get("instructions"), str) and params["instructions"]:
        messages.append({"role": "system", "blocks": [{"type": "text", "text": params["instructions"]}]})
    for item in items:
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            continue
        role = {"developer": "system"}.get(str(item.get("role")), str(item.get("role")))
        if role not in ("system", "user", "assistant"):
            continue
        messages.append({"role": role, "blocks": [{"type": "text", "text": _text_of(item.get("content"))}]})
    return messages


def prompt_text(row: dict[str, Any]) -> str:
    """The prompt as one text (what ``GET /prompt`` gives and TRL appends to the user turn): the messages'
    texts, blank-line separated."""
    return "\n\n".join(block["text"] for message in prompt_messages(row) for block in message["blocks"])
