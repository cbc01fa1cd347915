"""Whether a row's ground truth can be scored on the loaded databases, and a readable reason when not.

A ground truth that raises or is refused on the loaded databases (see :func:`replay.check_ground_truth`) leaves
the state it was meant to change untouched, so "doing nothing" would match it. The server never scores such a
row as a measurement: verify answers reward 0.0 with ``mask_sample`` and a ``failure_reason`` built here, and
the rows are reported as early as possible (at start-up for the configured datasets, at ``/seed_session`` for
each row). The usual cause is a row of WorkBench's own task set served with the bundled sample databases.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .replay import check_ground_truth
from .workspace import DATA_DIR_ENV, WorkBenchData

log = logging.getLogger("workplace_assistant")

#: NeMo Gym 0.7.0's shared failure name (``nemo_gym.failure_kinds.VERIFIER_ERROR``): the verifier could not
#: produce a valid measurement. The specifics are in ``failure_reason``.
VERIFIER_ERROR = "verifier_error"

#: Rows of a configured dataset checked at start-up (the check costs well under a millisecond a row).
STARTUP_SCAN_LIMIT = 10_000


def problem_reason(data: WorkBenchData, problems: list[tuple[int, str, str]], missing_ids: list[str]) -> str:
    """Why a ground truth cannot be scored: its failing calls, the ids not found, the data in use, a hint."""
    calls = "; ".join(f"#{i} {call}: {why}" for i, call, why in problems[:3])
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    reason = f"the ground truth cannot be replayed on the loaded databases ({data.source}): {calls}{more}"
    if missing_ids:
        reason += f". Not in the loaded data: {', '.join(dict.fromkeys(missing_ids))}"
    if data.is_sample:
        reason += (
            ". The bundled sample databases are loaded; rows of WorkBench's own task set need WorkBench's data "
            f"(config data_dir or ${DATA_DIR_ENV})"
        )
    return reason


def truth_problem(data: WorkBenchData, ground_truth: Any, *, workbench_strings: bool = True) -> str | None:
    """:func:`problem_reason` for a row's ``ground_truth`` (None when it replays cleanly or is not a list)."""
    if not isinstance(ground_truth, list):
        return None
    result = check_ground_truth(data, ground_truth, workbench_strings=workbench_strings)
    problems = sorted(result.failed + result.refused)
    return problem_reason(data, problems, result.missing_ids) if problems else None


class ReportOnce:
    """Logs each distinct problem once (a broken dataset would otherwise log the same line per rollout)."""

    def __init__(self, limit: int = 4096) -> None:
        self._seen: set[str] = set()
        self._limit = limit
        self._full = False

    def __call__(self, level: int, message: str) -> None:
        if message in self._seen or self._full:
            return
        if len(self._seen) >= self._limit:  # memory stays bounded; each verify response still says why
            self._full = True
            log.log(level, "more than %d distinct ground-truth problems: no longer logged one by one", self._limit)
            return
        self._seen.add(message)
        log.log(level, "%s", message)


@dataclass
class DatasetScan:
    """How many rows of a dataset file cannot be scored on the loaded databases."""

    path: Path
    rows: int
    unscorable: int
    first_reason: str | None
    truncated: bool


def _rows(path: Path, limit: int) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        for count, line in enumerate(fh):
            if count >= limit:
                return
            if line.strip():
                row = json.loads(line)
                if isinstance(row, dict):
                    yield row


def scan_dataset(
    data: WorkBenchData, path: Path, *, workbench_strings: bool = True, limit: int = STARTUP_SCAN_LIMIT
) -> DatasetScan:
    """Check the ground truth of the first ``limit`` rows of a JSONL dataset (OSError/ValueError if unreadable)."""
    rows = unscorable = 0
    first: str | None = None
    for row in _rows(path, limit):
        rows += 1
        reason = truth_problem(data, row.get("ground_truth"), workbench_strings=workbench_strings)
        if reason:
            unscorable += 1
            first = first or reason
    return DatasetScan(path, rows, unscorable, first, truncated=rows >= limit)


def dataset_paths(datasets: Any, bases: Iterable[Path]) -> list[Path]:
    """The existing ``jsonl_fpath`` files of a config's ``datasets`` entries (relative ones tried under ``bases``)."""
    found = []
    for entry in datasets if isinstance(datasets, list) else []:
        fpath = entry.get("jsonl_fpath") if isinstance(entry, dict) else None
        if not isinstance(fpath, str):
            continue
        candidates = [Path(fpath)] if Path(fpath).is_absolute() else [base / fpath for base in bases]
        found += [c for c in candidates if c.is_file()][:1]
    return found


def warn_about_datasets(data: WorkBenchData, datasets: Any, bases: Iterable[Path], *, workbench_strings: bool) -> None:
    """At start-up: one WARNING per configured dataset holding rows that cannot be scored on ``data``."""
    for path in dataset_paths(datasets, list(bases)):
        try:
            scan = scan_dataset(data, path, workbench_strings=workbench_strings)
        except (OSError, ValueError) as exc:
            log.debug("dataset %s not checked: %s", path, exc)
            continue
        if scan.unscorable:
            checked = f"the first {scan.rows}" if scan.truncated else f"{scan.rows}"
            log.warning(
                "%d of %s rows of %s cannot be scored on the loaded databases; verify will answer reward 0.0 "
                "with mask_sample for them. First: %s",
                scan.unscorable,
                checked,
                path,
                scan.first_reason,
            )
