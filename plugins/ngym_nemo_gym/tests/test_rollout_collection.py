"""``nemo_gym.rollout_collection``'s row vocabulary and resume rules, and ``server_utils``' process-wide client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nemo_gym import server_utils
from nemo_gym.rollout_collection import (
    NG_FAILURE_CLASS_KEY,
    NG_TERMINAL_KEY,
    DispatchLatencyTracker,
    SharedRolloutCollectionConfig,
    get_max_rollout_attempts,
    is_terminal_failure,
    migrate_invalid_judge_main_rows,
    observed_elapsed,
)


def test_attempts_come_from_the_environment_with_a_safe_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "5")
    assert get_max_rollout_attempts() == 5
    monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "0")
    assert get_max_rollout_attempts() == 3


def test_terminal_failures_and_the_timeout_retry_opt_in() -> None:
    timeout = {NG_FAILURE_CLASS_KEY: "timeout_exceeded", NG_TERMINAL_KEY: True}
    assert is_terminal_failure(timeout) is True
    assert is_terminal_failure(timeout, retry_terminal_timeouts=True) is False
    assert is_terminal_failure({NG_FAILURE_CLASS_KEY: "skipped"}, retry_terminal_timeouts=True) is True
    assert is_terminal_failure({NG_FAILURE_CLASS_KEY: "agent_run_error"}) is False


def test_elapsed_is_read_from_the_row_or_its_response_metadata() -> None:
    assert observed_elapsed({"elapsed_seconds": "2.5"}) == 2.5
    assert observed_elapsed({"elapsed_seconds": 0, "response": {"metadata": {"elapsed_seconds": 4}}}) == 4.0
    assert observed_elapsed({"elapsed_seconds": "n/a"}) is None


def test_latency_quantiles_and_drain_margin() -> None:
    tracker = DispatchLatencyTracker()
    for seconds in (10, 20, 30, 40):
        tracker.record(seconds)
    assert tracker.quantile(0.5) == 25.0
    assert tracker.drain_margin(None) is None  # fewer than five finished tasks: no adaptive margin yet
    tracker.record(50)
    assert tracker.drain_margin(None) == 40.0 and tracker.drain_margin(7.0) == 7.0


def test_invalid_judge_rows_move_to_the_sidecar_once(tmp_path: Path) -> None:
    rollouts = tmp_path / "rollouts.jsonl"
    rows = [
        {"_ng_task_index": 0, "_ng_rollout_index": 0, "reward": 1.0},
        {"_ng_task_index": 1, "_ng_rollout_index": 0, "reward": 0.0, "invalid_judge_response": True},
    ]
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert migrate_invalid_judge_main_rows(rollouts) == 1
    kept = [json.loads(line) for line in rollouts.read_text().splitlines()]
    moved = [json.loads(line) for line in (tmp_path / "rollouts_failures.jsonl").read_text().splitlines()]
    assert [r["_ng_task_index"] for r in kept] == [0]
    assert moved[0][NG_FAILURE_CLASS_KEY] == "judge_invalid" and NG_TERMINAL_KEY not in moved[0]
    assert migrate_invalid_judge_main_rows(rollouts) == 0  # nothing left to move


def test_require_complete_counts_distinct_successful_rollouts() -> None:
    config = SharedRolloutCollectionConfig(output_jsonl_fpath="out.jsonl", require_complete=True)
    done = [{"_ng_task_index": 0, "_ng_rollout_index": 0}, {"_ng_task_index": 1, "_ng_rollout_index": 0}]
    config.check_completion(expected=2, results=done)
    with pytest.raises(RuntimeError, match="1/2 samples completed"):
        config.check_completion(expected=2, results=[done[0], {**done[1], NG_FAILURE_CLASS_KEY: "agent_run_error"}])
    with pytest.raises(ValueError, match="environment_server_name is required"):
        SharedRolloutCollectionConfig(output_jsonl_fpath="o", environment_routing_mode="legacy")


def test_a_process_wide_client_is_used_until_it_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_utils, "_GLOBAL_AIOHTTP_CLIENT", None)

    async def scenario() -> None:
        client = server_utils.set_global_aiohttp_client(server_utils.GlobalAIOHTTPAsyncClientConfig())
        assert server_utils._client_session() is client
        with pytest.raises(AssertionError, match="already a global aiohttp client"):
            server_utils.set_global_aiohttp_client(server_utils.GlobalAIOHTTPAsyncClientConfig())
        server_utils.global_aiohttp_client_exit()
        assert not server_utils.is_global_aiohttp_client_setup()
        assert server_utils._client_session() is not client
        await server_utils.close_client_session()
        await asyncio.sleep(0)  # let the scheduled close of the global client run

    asyncio.run(scenario())
