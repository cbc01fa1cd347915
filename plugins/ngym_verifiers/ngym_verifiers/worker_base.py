"""The worker's base, shared by both kinds of verifiers environment it serves (``worker``, ``worker_legacy``): its
errors, the sessions it holds, datasets read from local files, JSON-friendly values.

Runs in the environment's own interpreter, beside ``worker.py``: the standard library only (``datasets`` is
imported when a local dataset is asked for, from the environment's venv).
"""

from __future__ import annotations

import importlib
import json
import re
from typing import Any

#: how many of the environment's own tasks ``describe`` returns as examples (ngym records a rollout of each).
EXAMPLES = 5


class Refused(Exception):
    """The environment (or this request) does not map onto a resources server; the message says why."""


class BadRequest(Exception):
    """The request names something the environment does not have (a task, a tool)."""


#: exception types (by name, anywhere in the chain) that mean "the network was needed and is not there"
_UNREACHABLE = {
    "ConnectionError", "ConnectTimeout", "ConnectTimeoutError", "NameResolutionError", "MaxRetryError",
    "NewConnectionError", "gaierror", "OfflineModeIsEnabled", "LocalEntryNotFoundError", "DatasetNotFoundError",
    "HfHubHTTPError", "RepositoryNotFoundError", "APIConnectionError",
}  # fmt: skip


def unreachable(exc: BaseException) -> str | None:
    """Why ``exc`` is the environment needing the network (a dataset on the Hugging Face Hub, a model API) that
    this machine cannot reach and has not cached; None when it is something else."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    names = {type(e).__name__ for e in seen}
    text = " ".join(str(e) for e in seen)
    if not names & _UNREACHABLE and "huggingface.co" not in text:
        return None
    first = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    hub = re.search(r"reach '([^']+)' on the Hub", text)
    if hub:
        what = f"the dataset {hub.group(1)} from the Hugging Face Hub"
    elif "huggingface" in text.lower() or " on the Hub" in text or names & _HUB:
        what = "data from the Hugging Face Hub"
    else:
        what = "a network service"
    hint = f"; give its rows from a file: -o dataset:{hub.group(1)}=ROWS.jsonl" if hub else ""
    return f"it needs {what}, which this machine cannot reach and has not cached ({first}){hint}"


_HUB = {"OfflineModeIsEnabled", "LocalEntryNotFoundError", "DatasetNotFoundError", "HfHubHTTPError"}


#: JSON {dataset name: local JSON-lines file}: ``datasets.load_dataset(name, ...)`` reads the file instead of the
#: Hugging Face Hub (``ngym install ... -o dataset:NAME=FILE.jsonl``), the environment's own code processing the rows
DATASETS_ENV = "NGYM_VERIFIERS_DATASETS"


def local_datasets(files: dict[str, str]) -> None:
    """Make ``datasets.load_dataset`` read each named dataset from its local file (before the environment's
    module is imported, so a ``from datasets import load_dataset`` there gets this one too)."""
    if not files:
        return
    import datasets

    hub_load = datasets.load_dataset

    def load_dataset(path: Any, *args: Any, **kwargs: Any) -> Any:
        if path not in files:
            return hub_load(path, *args, **kwargs)
        split = kwargs.get("split")
        # a config name (args[0] or name=) selects nothing in a single file; a split keeps its slice ("test[:5]")
        rows = hub_load("json", data_files=files[path], split=re.sub(r"^[A-Za-z0-9_-]+", "train", split or "train"))
        return rows if split else datasets.DatasetDict({"train": rows})

    datasets.load_dataset = load_dataset


def _import_source(source: str) -> Any:
    """The environment's module: ``source`` is an importable module name (dashes read as underscores)."""
    return importlib.import_module(source.replace("-", "_"))


def _plain(value: Any) -> Any:
    """A JSON-friendly copy of a tool result or message content."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _text(content: Any) -> str:
    """A tool message's content as the model sees it (text parts joined)."""
    content = _plain(content)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return json.dumps(content)


def _answer(value: Any) -> str | None:
    """A task's reference answer as the text a model would write (None when the task has none)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(_plain(value)) if isinstance(value, (dict, list)) else str(value)


class Sessions:
    """The rollouts a worker holds, by ngym's session id: what both environment kinds share."""

    def __init__(self) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}

    async def close(self, session: str) -> dict[str, Any]:
        live = self.sessions.pop(session, None)
        runtime = live.get("runtime") if live else None
        if runtime is not None:  # a 0.4 rollout's runtime: its folder and every process it started go with it
            await runtime.stop()
        return {}

    async def close_all(self) -> None:
        """Close every rollout still held (the worker is ending)."""
        for session in list(self.sessions):
            try:
                await self.close(session)
            except Exception:  # noqa: BLE001 - one rollout's teardown must not keep the others'
                continue

    def _session(self, session: str) -> dict[str, Any]:
        if session not in self.sessions:
            raise BadRequest(f"session {session!r} was not seeded (or is closed)")
        return self.sessions[session]
