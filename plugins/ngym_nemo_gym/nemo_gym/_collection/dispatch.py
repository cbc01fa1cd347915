"""Sending rows to ``/run`` and turning the answers into results: concurrency, the dispatch budget, failures.

Rows start in the order given (a row's ``/run`` begins once a ``semaphore`` slot is free) and are handed back in
the order they finish, each as a :class:`CompletedRollout`. With ``route_failures_to_sidecar`` a ``/run`` that
answers an error (or never answers) becomes a failure row instead of an exception that ends the run. With a
``dispatch_budget_s`` a row whose turn comes too late (the budget spent, or less left than the drain margin) is
not started: it resolves to a "drained" result that is written nowhere, so a resumed run sends it again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Coroutine, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

import aiohttp
import orjson

from nemo_gym._collection.preprocess import materialized_taskset
from nemo_gym._collection.records import (
    ENVIRONMENT_SERVER_FAILURE_CLASS,
    NG_ENVIRONMENT_SERVER_KEY,
    NG_FAILURE_CLASS_KEY,
    NG_PERF_KEY,
    NG_TASK_ID_KEY,
    NG_TERMINAL_KEY,
    NG_TRAJECTORY_KEY,
    CompletedRollout,
    DispatchLatencyTracker,
    _dispatch_drained_result,
    request_failure_row,
)
from nemo_gym._collection.routing import (
    check_rows_routable,
    dispatch_server_for_agent,
    environment_server_types,
    environment_servers_by_agent,
)
from nemo_gym.global_config import (
    AGENT_REF_KEY_NAME,
    ATTEMPT_INDEX_KEY_NAME,
    ROLLOUT_INDEX_KEY_NAME,
    TASK_INDEX_KEY_NAME,
)
from nemo_gym.rollout_correlation import maybe_rollout_id_from_run_body
from nemo_gym.server_utils import ServerCallError, ServerClient, get_response_json, raise_for_status

#: ``/run`` failures that are data (a failure row under ``route_failures_to_sidecar``); anything else is a bug
RUN_FAILURE_ERRORS = (aiohttp.ClientError, orjson.JSONDecodeError, TimeoutError, ServerCallError)


def dispatch(
    client: ServerClient,
    rows: list[dict[str, Any]],
    *,
    semaphore: AbstractAsyncContextManager[Any] | None = None,
    route_failures_to_sidecar: bool = False,
    environment_server_name: str | None = None,
    max_resident_tasks: int | None = None,
    dispatch_budget_s: float | None = None,
    drain_margin_s: float | None = None,
    latency_tracker: DispatchLatencyTracker | None = None,
) -> Dispatched:
    """Send every row to ``/run`` (see the module docstring); awaitables in the order the rollouts finish.

    Routing is checked for every row before the first is sent, so an unroutable row fails the run rather than
    one rollout. ``max_resident_tasks`` bounds how many rollouts are in flight, as ``semaphore`` does.
    """
    global_config = client.global_config_dict or {}
    if environment_server_name is not None:
        for row in rows:
            row[NG_ENVIRONMENT_SERVER_KEY] = environment_server_name
    check_rows_routable(rows, global_config)
    servers_by_agent = environment_servers_by_agent(global_config)
    target = {
        agent: dispatch_server_for_agent(agent, servers_by_agent)
        for agent in {row[AGENT_REF_KEY_NAME]["name"] for row in rows if NG_ENVIRONMENT_SERVER_KEY not in row}
    }
    server_types = environment_server_types(global_config)
    tracker = latency_tracker if latency_tracker is not None else DispatchLatencyTracker()
    # `is not None`: a budget of 0.0 is already spent and must drain, not switch the check off.
    deadline = time.monotonic() + dispatch_budget_s if dispatch_budget_s is not None else None
    slots = semaphore or nullcontext()
    resident = asyncio.Semaphore(max_resident_tasks) if max_resident_tasks is not None else nullcontext()

    async def one(row: dict[str, Any]) -> CompletedRollout:
        server = row.get(NG_ENVIRONMENT_SERVER_KEY)
        server = server if isinstance(server, str) else target[row[AGENT_REF_KEY_NAME]["name"]]
        done = _Completion(row, server, server_types.get(server))
        async with resident, slots:
            # Checked once a slot is held: the time left when the rollout would really start.
            if deadline is not None:
                remaining = deadline - time.monotonic()
                margin = tracker.drain_margin(drain_margin_s)
                if remaining <= 0 or (margin is not None and remaining < margin):
                    tracker.record_drained()
                    return done(_dispatch_drained_result(remaining, margin), None)
            started, started_wall = time.monotonic(), time.time()
            response = None
            try:
                body = episode_request(row) if materialized_taskset(row) else row
                response = await client.post(server_name=server, url_path="/run", json=body)
                await raise_for_status(response)
                result = await get_response_json(response)
            except Exception as exc:
                status = getattr(exc, "status", None) or getattr(response, "status", None)
                print(
                    f"[rollout_collection] /run failed status={status} row={json.dumps(_summary(row, server))}",
                    flush=True,
                )
                if not route_failures_to_sidecar or not isinstance(exc, RUN_FAILURE_ERRORS):
                    raise
                return done(request_failure_row(exc, status), None)
            tracker.record(time.monotonic() - started)
            return done(result, (time.time() - started_wall) * 1000)

    return Dispatched([one(row) for row in rows])


class Dispatched:
    """The rollouts in flight, handed out in the order they finish (``for future in ...: await future``).

    Tasks are created on first use, in row order (``asyncio.as_completed`` alone would start them from a set, in no
    order). ``aclose()`` cancels whatever is still running: a run that stops on an error leaves nothing behind.
    """

    def __init__(self, coroutines: list[Coroutine[Any, Any, CompletedRollout]]) -> None:
        self._coroutines = coroutines
        self._tasks: list[asyncio.Future[CompletedRollout]] = []
        self._finishing: Iterator[Awaitable[CompletedRollout]] | None = None

    def __iter__(self) -> Dispatched:
        return self

    def __next__(self) -> Awaitable[CompletedRollout]:
        if self._finishing is None:
            self._tasks = [asyncio.ensure_future(c) for c in self._coroutines]
            self._coroutines = []
            self._finishing = iter(asyncio.as_completed(self._tasks))
        return next(self._finishing)

    async def aclose(self) -> None:
        for coroutine in self._coroutines:  # never started
            coroutine.close()
        running = [task for task in self._tasks if not task.done()]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


class _Completion:
    def __init__(self, row: dict[str, Any], server: str, server_type: str | None) -> None:
        self.row, self.server, self.server_type = row, server, server_type

    def __call__(self, result: dict[str, Any], latency_ms: float | None) -> CompletedRollout:
        # A row sent straight to its agent (no environment server fronts it) names no server.
        stamped = self.server_type is not None or NG_ENVIRONMENT_SERVER_KEY in self.row
        return CompletedRollout(
            row=self.row,
            result=result,
            rollout_latency_ms=latency_ms,
            environment_server=self.server if stamped else None,
            environment_server_type=self.server_type,
        )


def _summary(row: Mapping[str, Any], server: str) -> dict[str, Any]:
    """Which rollout failed, for the log line (never the row's payload)."""
    summary = {
        TASK_INDEX_KEY_NAME: row.get(TASK_INDEX_KEY_NAME),
        ROLLOUT_INDEX_KEY_NAME: row.get(ROLLOUT_INDEX_KEY_NAME),
        "agent_name": (row.get(AGENT_REF_KEY_NAME) or {}).get("name"),
        "server": server,
        "taskset": materialized_taskset(row),
    }
    return {key: value for key, value in summary.items() if value is not None}


# ---- materialized tasks: episode requests and their answers ------------------------------------------------


def episode_request(row: Mapping[str, Any]) -> dict[str, Any]:
    """The ``/run`` body of a materialized task row: ``episode_id`` (rollout id, attempt) and the ``task``."""
    attempt = row.get(ATTEMPT_INDEX_KEY_NAME, 0)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 0:
        raise ValueError(f"Invalid episode attempt: {attempt!r}")
    # The rollout id is the first attempt's: the attempt travels beside it.
    rollout_id = maybe_rollout_id_from_run_body({**row, ATTEMPT_INDEX_KEY_NAME: 0})
    if rollout_id is None:
        rollout_id = f"{row[TASK_INDEX_KEY_NAME]}-{row[ROLLOUT_INDEX_KEY_NAME]}"
    return {
        "episode_id": {"rollout_id": rollout_id, "attempt": attempt},
        "task": {"task_id": row["task_id"], "task_input": row["task_input"]},
    }


def is_episode_response(result: Any) -> bool:
    """An episode server's answer: its identities plus a ``result`` or a ``failure``."""
    return (
        isinstance(result, Mapping)
        and isinstance(result.get("episode_id"), Mapping)
        and isinstance(result.get("task_id"), Mapping)
        and ("result" in result or "failure" in result)
    )


def _reserved(key: str) -> bool:
    return key.startswith("_ng_") or key in (NG_TRAJECTORY_KEY, "ng_model_call_capture", NG_PERF_KEY)


def episode_record(response: Mapping[str, Any]) -> dict[str, Any]:
    """The stored record of an episode answer: its ``result`` as given (scored by a top-level ``reward``), or a
    failures-sidecar row (``environment_server_failed``, terminal as the server says)."""
    task_id = response.get("task_id")
    failure = response.get("failure")
    if failure is not None:
        if not isinstance(failure, Mapping):
            raise ValueError(f"environment server reply for task {task_id!r} carries a non-object failure: {failure!r}")
        record: dict[str, Any] = {
            NG_TASK_ID_KEY: task_id,
            NG_FAILURE_CLASS_KEY: ENVIRONMENT_SERVER_FAILURE_CLASS,
            NG_TERMINAL_KEY: bool(failure.get("terminal", False)),
            "_ng_failure_message": failure.get("failure_reason"),
        }
        for key, name in (("stage", "_ng_failure_stage"), ("partial_response", "_ng_failure_partial_response")):
            if failure.get(key) is not None:
                record[name] = failure[key]
        return record
    result = response.get("result")
    if not isinstance(result, Mapping):
        raise ValueError(f"environment server reply for task {task_id!r} carries a non-object result: {result!r}")
    reserved = sorted(key for key in result if _reserved(key))
    if reserved:
        raise ValueError(
            f"environment server result for task {task_id!r} uses keys reserved for rollout collection: {reserved}"
        )
    return {**result, NG_TASK_ID_KEY: task_id}
