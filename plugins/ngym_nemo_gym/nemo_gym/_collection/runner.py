"""One rollout collection from a config (NeMo Gym's ``RolloutCollectionHelper.run_from_config``).

Files, all beside ``output_jsonl_fpath`` (``rollouts.jsonl``):

- ``rollouts_materialized_inputs.jsonl``: every rollout owed, as dispatched (routing, indices, repeats applied);
- ``rollouts.jsonl``: one line per successful rollout, appended as it finishes;
- ``rollouts_failures.jsonl``: one line per failed attempt (a result carrying ``_ng_failure_class``, or a
  ``/run`` that failed under ``route_failures_to_sidecar``); it never enters the score unless its class is in
  ``count_failure_classes_as_zero``;
- ``rollouts_aggregate_metrics.json``: the environment's ``/aggregate_metrics`` answer.

The files are appended and resumed through ngym's rollout ledger (``ngym.plugin_api``: one whole line per
write, a torn last line repaired before resuming, the same resume key as ``ngym rollout``), written with orjson
as NeMo Gym writes them. A fresh run clears the three outputs. ``resume_from_cache`` keeps them and sends only
what is still owed: not yet successful, not stamped terminal, and under ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS``
recorded failures. A run none of whose dispatched rollouts produced a result (nor a counted zero) raises: it
has no score to report.

The helper passed in supplies the server client and the steps drivers override (NeMo's private method names), so
a test or a driver that replaces one of them on ``nemo_gym.rollout_collection`` is obeyed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from contextlib import AsyncExitStack, nullcontext
from pathlib import Path
from typing import Any, Protocol

import orjson

from nemo_gym._collection.config import RolloutCollectionConfig
from nemo_gym._collection.dispatch import episode_record, is_episode_response
from nemo_gym._collection.metrics import (
    coverage_report,
    fill_task_fields,
    missing_rollouts_as_zero,
    routing_identity,
)
from nemo_gym._collection.perf import attach_ng_perf
from nemo_gym._collection.preprocess import materialized_taskset
from nemo_gym._collection.records import (
    NG_DISPATCH_DRAINED_KEY,
    NG_ENVIRONMENT_SERVER_KEY,
    NG_FAILURE_CLASS_KEY,
    NG_NO_PERSIST_KEY,
    NG_RESULT_TYPE_KEY,
    NO_RESULT_FAILURE_CLASSES,
    DispatchLatencyTracker,
    counted_failure_row,
    get_max_rollout_attempts,
    is_terminal_failure,
    latest_failure_rows,
    migrate_invalid_judge_main_rows,
    observed_elapsed,
    read_jsonl,
    rollout_key,
    rollout_order,
)
from nemo_gym._collection.routing import assign_agents
from nemo_gym.base_responses_api_model import observability_enabled_from_config
from nemo_gym.global_config import (
    AGENT_REF_KEY_NAME,
    ATTEMPT_INDEX_KEY_NAME,
    ROLLOUT_ID_KEY_NAME,
    ROLLOUT_INDEX_KEY_NAME,
    SKILLS_REF_KEY_NAME,
    TASK_INDEX_KEY_NAME,
    TASK_SOURCE_KEY_NAME,
)
from nemo_gym.path_utils import aggregate_metrics_path_for, failures_path_for
from nemo_gym.server_utils import ServerClient
from ngym.plugin_api import LedgerAppender, done_keys, drop_truncated_tail

#: row keys every result carries back from its row
_CARRIED = (AGENT_REF_KEY_NAME, TASK_SOURCE_KEY_NAME, SKILLS_REF_KEY_NAME, ATTEMPT_INDEX_KEY_NAME, ROLLOUT_ID_KEY_NAME)


class CollectionSteps(Protocol):
    """What :func:`collect` needs of ``RolloutCollectionHelper`` (NeMo's method names)."""

    def setup_server_client(self, head_server_config: Any = None) -> ServerClient: ...
    def _preprocess_rows_from_config(self, config: RolloutCollectionConfig) -> list[dict[str, Any]]: ...
    def _run_examples_with_metadata(self, examples: list[dict[str, Any]], **kwargs: Any) -> Any: ...
    async def _call_aggregate_metrics(
        self, results: list[dict[str, Any]], rows: list[dict[str, Any]], output_fpath: Path
    ) -> Path | None: ...
    def _global_config_dict(self) -> Any: ...


async def collect(steps: CollectionSteps, config: RolloutCollectionConfig) -> list[dict[str, Any]]:
    """Run the collection ``config`` describes (see the module docstring); the results of this run, in
    (task, rollout) order ([] with ``retain_results_in_memory=false``)."""
    config.refuse_unsupported()
    output = Path(config.output_jsonl_fpath)
    failures_path = failures_path_for(output)
    materialized = config.materialized_jsonl_fpath
    routed = config.environment_routing_mode != "agent" or bool(config.environment_server_routes)
    client = steps.setup_server_client() if routed else None
    output.parent.mkdir(parents=True, exist_ok=True)

    persisted_keys: set[tuple[Any, Any]] = set()
    if config.resume_from_cache and materialized.exists() and output.exists():
        drop_truncated_tail(output, loads=orjson.loads)
        if failures_path.exists():
            drop_truncated_tail(failures_path, loads=orjson.loads)
        input_rows, rows, results = load_from_cache(config, persisted_keys)
    else:
        if config.resume_from_cache:
            print(f"Not resuming: {output} and {materialized} must both exist; starting fresh")
        rows, results = [], []
        input_rows = steps._preprocess_rows_from_config(config)
        # Agents are settled before the materialized write: that file is the run's record of what was owed, and
        # custom drivers read each row's agent from it.
        needs_agent = any(
            not (r.get(AGENT_REF_KEY_NAME) or {}).get("name")
            and (r.get(TASK_SOURCE_KEY_NAME) is not None or NG_ENVIRONMENT_SERVER_KEY in r)
            for r in input_rows
        )
        if needs_agent:
            assign_agents(input_rows, (client or steps.setup_server_client()).global_config_dict or {})
        with materialized.open("wb") as handle:
            handle.writelines(orjson.dumps(row) + b"\n" for row in input_rows)
        # A fresh run inherits no results, retry attempts or metrics from an older run at the same path.
        for stale in (output, failures_path, aggregate_metrics_path_for(output)):
            stale.unlink(missing_ok=True)
    persisted_rows, persisted_results = list(rows), list(results)

    global_config = client.global_config_dict if client is not None else steps._global_config_dict()
    observability = observability_enabled_from_config(global_config)
    semaphore = asyncio.Semaphore(config.num_samples_in_parallel) if config.num_samples_in_parallel else nullcontext()
    tracker = DispatchLatencyTracker()
    if config.route_failures_to_sidecar:
        print("route_failures_to_sidecar is on: a failed /run becomes a sidecar row and its rollout leaves the score.")
    failure_counts: Counter[str] = Counter()
    progress = _Progress(len(input_rows))
    async with AsyncExitStack() as files:
        results_file = files.enter_context(LedgerAppender(output, "a"))
        failures_file = files.enter_context(LedgerAppender(failures_path, "a"))
        in_flight = steps._run_examples_with_metadata(
            input_rows,
            semaphore=semaphore,
            route_failures_to_sidecar=config.route_failures_to_sidecar,
            max_resident_tasks=config.max_resident_rollout_tasks,
            dispatch_budget_s=config.dispatch_budget_s,
            drain_margin_s=config.drain_margin_s,
            latency_tracker=tracker,
        )
        # A run that stops on an error cancels the rollouts still in flight.
        files.push_async_callback(getattr(in_flight, "aclose", _nothing))
        for future in in_flight:
            completed = await future
            row, result = completed.row, completed.result
            if materialized_taskset(row) is not None and is_episode_response(result):
                result = episode_record(result)
            result[TASK_INDEX_KEY_NAME] = row[TASK_INDEX_KEY_NAME]
            result[ROLLOUT_INDEX_KEY_NAME] = row[ROLLOUT_INDEX_KEY_NAME]
            result.update({key: row[key] for key in _CARRIED if key in row})
            if completed.environment_server is not None:
                result[NG_ENVIRONMENT_SERVER_KEY] = completed.environment_server
            if completed.environment_server_type is not None:
                result[NG_RESULT_TYPE_KEY] = completed.environment_server_type
            attach_ng_perf(result, observability_enabled=observability, rollout_latency_ms=completed.rollout_latency_ms)
            if config.retain_results_in_memory:
                rows.append(row)
                results.append(result)

            failure_class = result.get(NG_FAILURE_CLASS_KEY)
            if result.get(NG_NO_PERSIST_KEY):
                pass  # never ran to the end (drained, or killed): written nowhere, so resume sends it again
            elif failure_class is not None:
                failure_counts[failure_class] += 1
                detail = str(result.get("_ng_failure_message") or result.get("error") or "")[:200]
                print(
                    f"🚨 [rollout_collection] rollout {rollout_key(row)} dropped from the score: "
                    f"class={failure_class} error={detail}"
                )
                failures_file.append(orjson.dumps(result) + b"\n")
            else:
                results_file.append(orjson.dumps(result) + b"\n")
                persisted_keys.add(rollout_key(result))
                if config.retain_results_in_memory:
                    persisted_rows.append(row)
                    persisted_results.append(result)
            scored = failure_class not in NO_RESULT_FAILURE_CLASSES and not result.get(NG_DISPATCH_DRAINED_KEY)
            progress.update(result if scored else None)

    counted = _counted_failures(failures_path, config.count_failure_classes_as_zero, persisted_keys)
    missing = []
    if config.count_missing_rollouts_as_zero and not config.disable_aggregation:
        recorded = set(latest_failure_rows([failures_path]))
        missing = missing_rollouts_as_zero(materialized, recorded, persisted_keys | {rollout_key(r) for r in counted})
    if input_rows and not persisted_keys and not counted and not missing:
        drained = (
            f" {tracker.drained} of them were never started because dispatch_budget_s ran out; "
            "resume_from_cache dispatches them in the next run."
            if tracker.drained
            else ""
        )
        raise RuntimeError(
            f"None of the {len(input_rows)} dispatched rollouts produced a result {dict(failure_counts)}.{drained} "
            f"Inspect {failures_path}; the run has no score to report."
        )
    print(tracker.summary())

    if not config.retain_results_in_memory:
        persisted_results = persisted_rows = read_jsonl(output) if not config.disable_aggregation else []
    for listed in (rows, results, persisted_rows, persisted_results):
        listed.sort(key=rollout_order)

    metrics_path = None
    if config.disable_aggregation:
        print("Skipping aggregate metrics (disable_aggregation): aggregate the shards together afterwards.")
    else:
        counted.extend(missing)
        fill_task_fields(counted, persisted_results, [materialized], routing_identity)
        scored_rows = persisted_results + counted
        metadata_rows = persisted_rows + counted
        order = sorted(range(len(scored_rows)), key=lambda i: rollout_order(scored_rows[i]))
        metrics_path = await steps._call_aggregate_metrics(
            [scored_rows[i] for i in order], [metadata_rows[i] for i in order], output
        )

    expected = _count_lines(materialized) if materialized.exists() else len(input_rows) + len(persisted_keys)
    scored_count = len(persisted_keys) + len(counted)
    coverage = coverage_report(expected, scored_count, failure_counts, failures_path, imputed=len(missing))
    print(
        f"Finished rollout collection! Materialized inputs: {materialized}\nRollouts: {output}\n"
        f"Aggregate metrics: {metrics_path}{coverage}"
    )
    if not config.disable_aggregation and not config.disable_health_check:
        print("Rollout health checks are NeMo Gym's (nemo_gym.rollout_health) and are not run under ngym.")
    config.check_completion(expected=expected, results=persisted_results)
    return results


def _counted_failures(failures_path: Path, classes: list[str], succeeded: set[tuple[Any, Any]]) -> list[dict[str, Any]]:
    """The sidecar's rollouts of the ``classes`` opted into the score, as zeros: each rollout's last attempt
    (picked before the classes are, so a stale attempt never stands in for a later one of another class)."""
    if not classes:
        return []
    wanted = set(classes)
    return [
        counted_failure_row(row)
        for key, row in latest_failure_rows([failures_path]).items()
        if key not in succeeded and row.get(NG_FAILURE_CLASS_KEY) in wanted
    ]


def load_from_cache(
    config: RolloutCollectionConfig, succeeded: set[tuple[Any, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Resume: (rows still to send, the rows of results already in the rollouts file, those results).

    ``succeeded`` is filled with the rollouts already done. A rollout is sent again unless it succeeded, its
    last failure is terminal, or it has failed ``NEMO_GYM_MAX_ROLLOUT_ATTEMPTS`` times; a retry carries its
    attempt number (``_ng_attempt_index``), and ``reuse_cached_deliverable`` when its failure row said so.
    """
    output = Path(config.output_jsonl_fpath)
    if config.retry_invalid_judge_responses:
        migrate_invalid_judge_main_rows(output)
    owed = read_jsonl(config.materialized_jsonl_fpath)
    results = read_jsonl(output)
    succeeded.update(done_keys(results))

    attempts: Counter[tuple[Any, Any]] = Counter()
    terminal, reuse = set(), set()
    elapsed: dict[tuple[Any, Any], float] = {}
    failures_path = failures_path_for(output)
    for failure in read_jsonl(failures_path) if failures_path.exists() else []:
        if TASK_INDEX_KEY_NAME not in failure or ROLLOUT_INDEX_KEY_NAME not in failure:
            continue
        key = rollout_key(failure)
        attempts[key] += 1
        if is_terminal_failure(failure, retry_terminal_timeouts=config.retry_terminal_timeouts):
            terminal.add(key)
        if failure.get("reuse_cached_deliverable"):
            reuse.add(key)
        seconds = observed_elapsed(failure)  # a failed attempt still says how long the task runs
        if seconds is not None:
            elapsed[key] = max(elapsed.get(key, 0.0), seconds)
    max_attempts = get_max_rollout_attempts()
    exhausted = {key for key, count in attempts.items() if count >= max_attempts}
    done = succeeded | terminal | exhausted
    pending = [row for row in owed if rollout_key(row) not in done]
    for row in pending:
        key = rollout_key(row)
        if attempts[key]:  # the first attempt stays unstamped: its rollout id is the bare one
            row[ATTEMPT_INDEX_KEY_NAME] = attempts[key]
        if key in reuse:
            row["reuse_cached_deliverable"] = True
    if config.dispatch_longest_first and elapsed:
        # Known-long tasks first, so they get a whole allocation; unseen ones keep their order behind them.
        known = sorted((r for r in pending if rollout_key(r) in elapsed), key=lambda r: -elapsed[rollout_key(r)])
        pending = known + [r for r in pending if rollout_key(r) not in elapsed]

    by_key = {rollout_key(row): row for row in owed}
    if not config.retain_results_in_memory:
        rows, results = [], []
    else:
        rows = [by_key[rollout_key(result)] for result in results]
    print(
        f"Resumed from cache: {len(owed)} rollouts owed, {len(succeeded)} done, {sum(attempts.values())} failed "
        f"attempts recorded ({len(attempts)} rollouts), {len(terminal)} terminal, {len(exhausted)} at "
        f"max_attempts={max_attempts}; {len(pending)} to send"
    )
    return pending, rows, results


async def _nothing() -> None:
    return None


def _count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


class _Progress:
    """A line at every tenth of the run: rollouts done, rate, mean of the numeric fields of scored results."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.started = total, 0, time.monotonic()
        self.sums: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.next_tenth = 1

    def update(self, result: dict[str, Any] | None) -> None:
        self.done += 1
        if result is not None:  # an infrastructure failure is neither a score nor a sample
            numeric = {k: v for k, v in result.items() if isinstance(v, int | float) and not k.startswith("_")}
            self.sums.update(numeric)
            self.counts.update(numeric.keys())
        if self.total and self.done * 10 >= self.next_tenth * self.total:
            self.next_tenth = self.done * 10 // self.total + 1
            minutes = max(time.monotonic() - self.started, 1e-9) / 60
            means = {k: round(self.sums[k] / self.counts[k], 4) for k in sorted(self.sums)}
            print(f"Finished {self.done} / {self.total} rollouts ({self.done / minutes:.2f}/min). Means: {means}")
