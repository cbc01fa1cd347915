"""The rows rollout collection reads and writes: NeMo Gym's row keys, resume rules, failure rows.

Environments that write or read collected rollouts (GDPVal's scorer and its multi-stage driver) use NeMo's row
keys (``_ng_failure_class``, ``_ng_failure_terminal``, ...) and resume rules: how many attempts a row gets, which
failures are never retried, how legacy invalid-judge rows move to the failures sidecar. The collector
(:mod:`nemo_gym._collection.runner`) writes its rows with them. ``nemo_gym.rollout_collection`` re-exports
these under NeMo's names.
"""

from __future__ import annotations

import bisect
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from nemo_gym.deliverables import is_deliverable
from nemo_gym.global_config import ATTEMPT_INDEX_KEY_NAME, ROLLOUT_INDEX_KEY_NAME, TASK_INDEX_KEY_NAME
from nemo_gym.path_utils import failures_path_for
from ngym.plugin_api import failure_kinds
from ngym.plugin_api import read_jsonl as read_ledger_jsonl
from ngym.plugin_api import rollout_key as rollout_key  # the ledger's resume key, under the collector's names
from ngym.plugin_api import rollout_order as rollout_order

# ---- row keys --------------------------------------------------------------------------------------------
NG_FAILURE_CLASS_KEY = "_ng_failure_class"  # why a rollout failed (a row in the failures sidecar)
NG_NO_PERSIST_KEY = "_ng_no_persist"  # a result that must not be written to the rollouts file
NG_DISPATCH_DRAINED_KEY = "_ng_dispatch_drained"  # a row the dispatch budget never started
NG_TERMINAL_KEY = "_ng_failure_terminal"  # a failure never retried on resume
NG_ENVIRONMENT_SERVER_KEY = "_ng_environment_server"
NG_RESULT_TYPE_KEY = "_ng_result_type"
NG_TASK_ID_KEY = "_ng_task_id"
NG_TRAJECTORY_KEY = "ng_trajectory"
NG_PERF_KEY = "ng_perf"
NG_ELAPSED_KEY = "elapsed_seconds"
AGENT_REQUEST_FAILED_FAILURE_CLASS = "agent_request_failed"
AGENT_RUN_ERROR_FAILURE_CLASS = "agent_run_error"
ENVIRONMENT_SERVER_FAILURE_CLASS = "environment_server_failed"
#: failure classes of a rollout that never produced a result: nothing to capture, average or score
NO_RESULT_FAILURE_CLASSES = frozenset(
    {AGENT_REQUEST_FAILED_FAILURE_CLASS, AGENT_RUN_ERROR_FAILURE_CLASS, ENVIRONMENT_SERVER_FAILURE_CLASS}
)

_DEFAULT_MAX_ROLLOUT_ATTEMPTS = 3
_MAX_ATTEMPTS_ENV = "NEMO_GYM_MAX_ROLLOUT_ATTEMPTS"
_MIGRATED_INVALID_JUDGE_KEY = "_ng_migrated_invalid_judge_response"


def get_max_rollout_attempts() -> int:
    """``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS`` (a positive integer), else 3; a bad value warns and gives 3."""
    raw = os.environ.get(_MAX_ATTEMPTS_ENV)
    if not raw:
        return _DEFAULT_MAX_ROLLOUT_ATTEMPTS
    try:
        attempts = int(raw)
    except ValueError:
        attempts = 0
    if attempts < 1:
        print(
            f"WARNING: could not parse {_MAX_ATTEMPTS_ENV}={raw!r} (a positive integer is expected); "
            f"falling back to default {_DEFAULT_MAX_ROLLOUT_ATTEMPTS}.",
            flush=True,
        )
        return _DEFAULT_MAX_ROLLOUT_ATTEMPTS
    return attempts


_get_max_rollout_attempts = get_max_rollout_attempts  # NeMo's older name


def observed_elapsed(record: dict[str, Any]) -> float | None:
    """The rollout's wall-clock seconds from a result or failure row (top level, else the response's
    metadata); ``None`` when neither holds a positive number."""
    candidates = (
        record.get(NG_ELAPSED_KEY),
        ((record.get("response") or {}).get("metadata") or {}).get(NG_ELAPSED_KEY),
    )
    for candidate in candidates:
        try:
            value = float(candidate) if candidate is not None else 0.0
        except (TypeError, ValueError):
            continue
        if value > 0:
            return value
    return None


def is_terminal_failure(record: Mapping[str, Any], *, retry_terminal_timeouts: bool = False) -> bool:
    """Whether a failure row is final on resume: stamped ``_ng_failure_terminal``.

    With ``retry_terminal_timeouts`` (for agents whose older builds stamped their per-attempt timeouts
    terminal), a timeout (``timeout_exceeded``) and GDPVal's repairable environment faults
    (``reference_missing``, ``eval_missing``, ``transport_ineligible``) are retried whatever the stamp, and a
    ``skipped`` sample is final whatever the stamp; the attempt cap still bounds retries.
    """
    if not retry_terminal_timeouts:
        return bool(record.get(NG_TERMINAL_KEY))
    failure_class = record.get(NG_FAILURE_CLASS_KEY)
    if failure_class in ("timeout_exceeded", "reference_missing", "eval_missing", "transport_ineligible"):
        return False
    if failure_class == "skipped":
        return True
    return bool(record.get(NG_TERMINAL_KEY))


def migrate_invalid_judge_main_rows(output_fpath: Path) -> int:
    """Move rows marked ``invalid_judge_response`` from the rollouts file to its failures sidecar; the number of
    such rows found.

    Older builds wrote an invalid judge answer as a zero-reward success, which counted in the score and stopped
    the row from being retried. Each moved row becomes a ``judge_invalid`` failure (not terminal; with
    ``reuse_cached_deliverable`` when its deliverables folder still holds work). The sidecar is appended and
    synced first, then the rollouts file is replaced atomically, so a crash loses no retry state; a marker per
    (stage, task, rollout, attempt) makes a second run add nothing twice.
    """
    if not output_fpath.exists():
        return 0
    rows = read_jsonl(output_fpath)
    invalid = sum(1 for row in rows if row.get("invalid_judge_response"))
    if not invalid:
        return 0

    def key(row: Mapping[str, Any]) -> tuple[Any, Any, Any, Any]:
        return (
            int(row.get("stage_index", 0) or 0),
            row.get(TASK_INDEX_KEY_NAME),
            row.get(ROLLOUT_INDEX_KEY_NAME),
            int(row.get(ATTEMPT_INDEX_KEY_NAME, 0) or 0),
        )

    failures_fpath = failures_path_for(output_fpath)
    failures_fpath.parent.mkdir(parents=True, exist_ok=True)
    migrated_keys = (
        {key(row) for row in read_jsonl(failures_fpath) if row.get(_MIGRATED_INVALID_JUDGE_KEY)}
        if failures_fpath.exists()
        else set()
    )
    mode = output_fpath.stat().st_mode & 0o7777
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, before the atomic replace
        mode="wb", dir=output_fpath.parent, prefix=f".{output_fpath.name}.migrate-", delete=False
    )
    temp_path = Path(handle.name)
    try:
        with handle as kept, failures_fpath.open("ab") as failures:
            for row in rows:
                if not row.get("invalid_judge_response"):
                    kept.write(orjson.dumps(row) + b"\n")
                    continue
                if key(row) in migrated_keys:
                    continue
                moved = {**row, NG_FAILURE_CLASS_KEY: row.get(NG_FAILURE_CLASS_KEY) or "judge_invalid"}
                moved.pop(NG_TERMINAL_KEY, None)
                moved.pop("reuse_cached_deliverable", None)
                if _has_deliverable(moved.get("deliverables_dir")):
                    moved["reuse_cached_deliverable"] = True
                moved[_MIGRATED_INVALID_JUDGE_KEY] = True
                failures.write(orjson.dumps(moved) + b"\n")
                migrated_keys.add(key(row))
            # Every retry record is durable before its success row leaves the rollouts file.
            failures.flush()
            os.fsync(failures.fileno())
            kept.flush()
            os.fsync(kept.fileno())
        os.chmod(temp_path, mode)
        os.replace(temp_path, output_fpath)
    finally:
        temp_path.unlink(missing_ok=True)
    return invalid


def _has_deliverable(folder: Any) -> bool:
    try:
        return bool(folder) and Path(folder).is_dir() and any(is_deliverable(p) for p in Path(folder).iterdir())
    except (OSError, TypeError):
        return False


class DispatchLatencyTracker:
    """Per-task durations seen by a dispatcher: latency percentiles beside the rollouts-per-hour rate (raising
    concurrency raises the rate while slowing every task), and the margin below which a task is not started."""

    def __init__(self) -> None:
        self._durations: list[float] = []  # kept sorted: quantiles are read before every dispatch
        self._drained = 0

    def record(self, seconds: float) -> None:
        if seconds > 0:
            bisect.insort(self._durations, seconds)

    def record_drained(self) -> None:
        self._drained += 1

    @property
    def drained(self) -> int:
        return self._drained

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile, interpolated linearly between neighbours; ``None`` before any duration."""
        if not self._durations:
            return None
        position = (len(self._durations) - 1) * q
        low = int(position)
        high = min(low + 1, len(self._durations) - 1)
        fraction = position - low
        return self._durations[low] * (1 - fraction) + self._durations[high] * fraction

    def drain_margin(self, configured: float | None) -> float | None:
        """Seconds a task needs left before it is worth starting: ``configured`` if given, else this run's p75
        once five tasks have finished, else ``None``."""
        if configured is not None:
            return configured
        return self.quantile(0.75) if len(self._durations) >= 5 else None

    def summary(self) -> str:
        if not self._durations:
            lines = ["No completed rollouts to report latency for."]
        else:
            minutes = {q: (self.quantile(q) or 0.0) / 60 for q in (0.5, 0.9, 0.99)}
            lines = [
                f"Per-task latency over {len(self._durations)} completed rollout(s): median {minutes[0.5]:.1f} min, "
                f"p90 {minutes[0.9]:.1f} min, p99 {minutes[0.99]:.1f} min, max {max(self._durations) / 60:.1f} min",
                f"Task-time delivered: {sum(self._durations) / 3600:.1f} task-hours",
            ]
        if self._drained:
            lines.append(
                f"Drained (not dispatched, no time left in the budget): {self._drained}. "
                "These wrote no row and will be re-dispatched on resume."
            )
        return "\n".join(lines)


def _dispatch_drained_result(remaining_s: float, margin_s: float | None) -> dict[str, Any]:
    """The result for a row the dispatch budget never started: written nowhere (its absence makes resume
    dispatch it again), kept out of every count."""
    reason = (
        f"not dispatched: {remaining_s:.0f}s left in dispatch budget, below the {margin_s:.0f}s drain margin"
        if margin_s is not None
        else "not dispatched: dispatch budget exhausted"
    )
    return {
        NG_FAILURE_CLASS_KEY: failure_kinds.CANCELLED,
        NG_NO_PERSIST_KEY: True,
        NG_DISPATCH_DRAINED_KEY: True,
        "error_message": reason,
    }


@dataclass(frozen=True)
class CompletedRollout:
    """One dispatched row and what came back; the latency travels beside the result, never inside it."""

    row: dict[str, Any]
    result: dict[str, Any]
    rollout_latency_ms: float | None
    environment_server: str | None = None
    environment_server_type: str | None = None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every row of a JSONL file, parsed by orjson (the ledger's reader: a malformed line is a ``ConfigError``
    naming the file and the line)."""
    return read_ledger_jsonl(path, loads=orjson.loads)


# Statuses a proxy or gateway in front of a server answers with: the rollout itself may never have started.
# Any other status came from the server, which answers 500 when its own handler raised: the rollout ran.
_NOT_RUN_STATUSES = frozenset({429, 502, 503, 504})
_FAILURE_BODY_LIMIT = 2000


def request_failure_row(exc: BaseException, status: int | None) -> dict[str, Any]:
    """The failures-sidecar row of a ``/run`` call that came back without a result.

    No ``reward`` and no ``response``: an infrastructure failure is not a score of zero (an evaluation that wants
    it counted names its class in ``count_failure_classes_as_zero``). ``agent_run_error`` when a server answered
    with its own error status, ``agent_request_failed`` when nothing (or only a gateway) answered.
    """
    ran = status is not None and status not in _NOT_RUN_STATUSES
    return {
        NG_FAILURE_CLASS_KEY: AGENT_RUN_ERROR_FAILURE_CLASS if ran else AGENT_REQUEST_FAILED_FAILURE_CLASS,
        "_ng_failure_type": type(exc).__name__,
        # NeMo Gym's own text of the error (ours adds the answer's body, which the next field carries already)
        "_ng_failure_message": getattr(exc, "nemo_text", None) or str(exc) or repr(exc),
        "_ng_failure_http_status": status,
        "_ng_failure_response_body": _shortened(getattr(exc, "response_content", None)),
    }


def _shortened(body: bytes | None) -> str | None:
    if not body:
        return None
    # Decode no more than the kept prefix needs: an error page can be megabytes.
    text = body[: _FAILURE_BODY_LIMIT * 4].decode("utf-8", "replace")
    return text[:_FAILURE_BODY_LIMIT] + ("…" if len(body) > _FAILURE_BODY_LIMIT else "")


def latest_failure_rows(paths: Iterable[Path]) -> dict[tuple[Any, Any], dict[str, Any]]:
    """The last attempt recorded for each rollout in these failures sidecars (missing files are skipped)."""
    latest: dict[tuple[Any, Any], dict[str, Any]] = {}
    for path in paths:
        if path.exists():
            for row in read_jsonl(path):
                latest[rollout_key(row)] = row
    return latest


def counted_failure_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The copy of a failures-sidecar row that enters the metrics as a zero (``count_failure_classes_as_zero``).

    Only this copy changes: the sidecar keeps the row's diagnostics and training mask. The diagnostics are left
    out (an HTTP status is a number, and ``/aggregate_metrics`` averages every number it is given), the row
    counts (``mask_sample`` false), and a row without a reward scores 0.0.
    """
    scored = {
        key: value
        for key, value in row.items()
        if not key.startswith("_ng_failure_") and key not in ("failure_kind", "failure_reason")
    }
    scored["mask_sample"] = False
    scored.setdefault("reward", 0.0)
    return scored
