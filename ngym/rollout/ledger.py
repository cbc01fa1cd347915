"""The rollout ledger: the JSONL files a rollout collection reads and writes, and what resume reads back from them.

One ledger for both collectors: ``ngym rollout`` (:mod:`ngym.rollout.runner`) and ngym-nemo-gym's
``ng_collect_rollouts`` (through ``ngym.plugin_api``). What they share is decided here, once:

- **Input rows**: :func:`read_jsonl` reads a JSONL file of objects; a malformed line is a ``ConfigError``
  naming the file and the line (never a traceback).
- **The resume key** of a rollout: :func:`rollout_key` is (row index, repeat), read from a row's
  ``_ng_task_index`` / ``_ng_rollout_index``; :func:`rollout_keys` lists every key a run owes (rows × repeats, in
  row order), :func:`rollout_order` sorts results task by task, repeat by repeat.
- **Resume**: :func:`read_results` reads an output file that a killed run may have left with a torn last line
  (that line is skipped); :func:`drop_truncated_tail` repairs such a file in place before it is appended to;
  :func:`pending` is what is still owed once the keys already done are taken out.
- **Appending**: :class:`LedgerAppender` writes each result as one whole line with one ``write`` on a file
  opened for appending, unbuffered, so a crash leaves at most one torn line at the end (which the readers above
  handle) and a finished result is on disk before the next starts. Callers choose the encoding (``ngym
  rollout`` writes ``json``, the NeMo collector ``orjson``, each as before: the bytes are the caller's).
- **Aggregate metrics**: :func:`verify_responses` is what goes to an environment's ``/aggregate_metrics``
  (the results without their bulky fields); :func:`mean_reward` the plain mean reward. The arithmetic is the
  environment's (``ngym.metrics``).

Standard library only, beside the wire's key names (``ngym.server.protocol``): no HTTP client, no event loop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from ngym.jsonl import Loads as Loads  # re-exported: the ledger reads its rows with these
from ngym.jsonl import read_jsonl as read_jsonl
from ngym.server.protocol.bodies import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY

#: A rollout within one run: (task index, rollout index). Values are whatever the row holds (``None`` if absent).
RolloutKey = tuple[Any, Any]


def rollout_key(row: Mapping[str, Any]) -> RolloutKey:
    """The resume key of a row or result: (task index, rollout index)."""
    return (row.get(TASK_INDEX_KEY), row.get(ROLLOUT_INDEX_KEY))


def rollout_order(row: Mapping[str, Any]) -> tuple[int, int]:
    """Task, then repeat (a missing index counts as 0): metric hooks read a task's repeats in order."""
    return (row.get(TASK_INDEX_KEY) or 0, row.get(ROLLOUT_INDEX_KEY) or 0)


def rollout_keys(num_rows: int, repeats: int) -> list[tuple[int, int]]:
    """Every rollout a run of ``num_rows`` rows × ``repeats`` owes, row by row."""
    return [(task, repeat) for task in range(num_rows) for repeat in range(repeats)]


def pending(keys: Iterable[RolloutKey], done: Collection[RolloutKey]) -> list[RolloutKey]:
    """The keys not yet ``done``, in their order."""
    return [key for key in keys if key not in done]


def read_results(path: Path, *, loads: Loads = json.loads) -> list[dict[str, Any]]:
    """The results already in an output file, for resume: objects carrying a task index.

    A line that does not parse (the torn last line of a killed run) is skipped, as is anything else that is not
    a result; a missing file has none.
    """
    path = Path(path)
    if not path.is_file():
        return []
    results = []
    with path.open("rb") as handle:
        for line in handle:
            try:
                value = loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and TASK_INDEX_KEY in value:
                results.append(value)
    return results


def done_keys(results: Iterable[Mapping[str, Any]]) -> set[RolloutKey]:
    """The resume keys of these results."""
    return {rollout_key(result) for result in results}


def drop_truncated_tail(path: Path, *, loads: Loads = json.loads) -> None:
    """Repair a JSONL file whose last line a hard kill cut short (dropped when it is not JSON, else ended with a
    newline), so resume can read it and append to it. Reads backwards in chunks: rollout files can be large."""
    with Path(path).open("r+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        start, end = 0, size
        while end > 0:
            chunk_start = max(0, end - (1 << 20))
            handle.seek(chunk_start)
            newline = handle.read(end - chunk_start).rfind(b"\n")
            if newline >= 0:
                start = chunk_start + newline + 1
                break
            end = chunk_start
        handle.seek(start)
        tail = handle.read()
        try:
            loads(tail)
        except ValueError:
            handle.truncate(start)
            print(f"Dropped a truncated final line ({len(tail)} bytes) from {path} before resuming.")
        else:
            handle.write(b"\n")


def json_line(record: Mapping[str, Any]) -> bytes:
    """``ngym rollout``'s line: ``json.dumps`` (non-ASCII kept as is), UTF-8, a newline."""
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")


class LedgerAppender:
    """Appends whole lines to one ledger file: ``append(line)`` is one unbuffered ``write`` of the complete line.

    ``mode="a"`` (resume: after what is there) or ``"w"`` (a fresh file). Use as a context manager; the file is
    created with its parent folder.
    """

    def __init__(self, path: Path, mode: Literal["a", "w"] = "a") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Unbuffered: each line reaches the file in the call that appends it, not at some later flush.
        self._file = self.path.open(f"{mode}b", buffering=0)
        self.lines = 0

    def append(self, line: bytes) -> None:
        """Write ``line`` (one encoded record, ending with a newline) at the end of the file."""
        if not line.endswith(b"\n"):
            raise ValueError("a ledger line ends with a newline")
        view = memoryview(line)
        while view:  # a regular file takes it in one write; a short write is finished, never interleaved
            written = self._file.write(view)
            view = view[written or 0 :]
        self.lines += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> LedgerAppender:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def verify_responses(
    results: Iterable[Mapping[str, Any]], drop: Collection[str], keep_from_response: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The ``verify_responses`` of an ``/aggregate_metrics`` body: each result without the ``drop`` fields.

    ``keep_from_response`` names fields of a dropped ``response`` worth keeping (NeMo keeps ``usage`` and
    ``incomplete_details``); a result whose response has none of them gets no ``response``.
    """
    entries = []
    for result in results:
        entry = {key: value for key, value in result.items() if key not in drop}
        if keep_from_response:
            response = result.get("response") or {}
            kept = {key: response[key] for key in keep_from_response if response.get(key) is not None}
            if kept:
                entry["response"] = kept
        entries.append(entry)
    return entries


def mean_reward(results: Iterable[Mapping[str, Any]]) -> float | None:
    """The mean numeric ``reward`` of these results, masked ones left out; ``None`` when none counts.

    A masked result (``mask_sample``: its session was lost, its judge failed) carries a placeholder reward the
    model did not earn: counting its 0.0 would quietly lower the mean, the wrong number a trainer must not see.
    """
    rewards = [
        float(r["reward"]) for r in results if isinstance(r.get("reward"), int | float) and not r.get("mask_sample")
    ]
    return sum(rewards) / len(rewards) if rewards else None


def masked_count(results: Iterable[Mapping[str, Any]]) -> int:
    """How many results are masked (``mask_sample``): reported beside the mean they are left out of."""
    return sum(1 for r in results if r.get("mask_sample"))
