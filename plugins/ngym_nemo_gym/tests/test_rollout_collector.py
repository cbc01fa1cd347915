"""``nemo_gym.rollout_collection``'s collector (``RolloutCollectionHelper.run_from_config``) and shard
aggregation, against agent and environment servers on real sockets, found by name as ``ngym run`` would."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from nemo_gym import rollout_collection as collection
from nemo_gym import server_utils
from ngym_nemo_gym.servers import set_global_config, set_server_urls
from pydantic import ValidationError

from ngym.rollout.thread_server import serve_app_in_thread


def _agent_app(state: SimpleNamespace) -> FastAPI:
    """A NeMo-style agent: ``/run`` scores a row 1.0 when its answer is "yes"; ``fail`` makes it fail."""
    app = FastAPI()

    @app.post("/run")
    async def run(request: Request) -> Any:
        row = await request.json()
        state.runs.append(row)
        failure = row.get("fail")
        if failure == "http" or (failure == "first" and row.get("_ng_attempt_index", 0) == 0):
            return JSONResponse({"detail": "the verifier did not collect a cohort"}, status_code=500)
        result = {**row, "response": {"id": f"r{len(state.runs)}", "usage": {"total_tokens": 3}}, "reward": 0.0}
        if failure == "judge":
            return {**result, "_ng_failure_class": "judge_failed", "failure_reason": "judge unavailable"}
        result["reward"] = 1.0 if row.get("answer") == "yes" else 0.0
        return result

    @app.post("/aggregate_metrics")
    async def aggregate(request: Request) -> Any:
        rows = (await request.json())["verify_responses"]
        state.aggregated.append(rows)
        mean = sum(r["reward"] for r in rows) / len(rows)
        return {"agent_metrics": {"mean/reward": mean, "count": len(rows)}, "key_metrics": {"mean/reward": mean}}

    return app


def _relay_app(state: SimpleNamespace, agent_url: str) -> FastAPI:
    """An environment server in front of the agent (NeMo's legacy_agent relay), counting what passes through."""
    import httpx

    app = FastAPI()

    @app.post("/{path:path}")
    async def relay(path: str, request: Request) -> Any:
        state.relayed.append(path)
        async with httpx.AsyncClient() as client:
            answer = await client.post(f"{agent_url}/{path}", content=await request.body())
        return JSONResponse(answer.json(), status_code=answer.status_code)

    return app


@pytest.fixture
async def servers(clean_server_env: None) -> AsyncIterator[SimpleNamespace]:
    state = SimpleNamespace(runs=[], aggregated=[], relayed=[])
    with ExitStack() as stack:
        state.agent_url = stack.enter_context(serve_app_in_thread(_agent_app(state)))
        set_server_urls({"my_agent": state.agent_url})
        set_global_config({"my_agent": {"responses_api_agents": {"simple_agent": {}}}})
        yield state
        await server_utils.close_client_session()  # this test's event loop's HTTP session


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _config(tmp_path: Path, rows: list[dict[str, Any]], **options: Any) -> collection.RolloutCollectionConfig:
    return collection.RolloutCollectionConfig(
        input_jsonl_fpath=str(_write(tmp_path / "input.jsonl", rows)),
        output_jsonl_fpath=str(tmp_path / "out" / "rollouts.jsonl"),
        agent_name="my_agent",
        disable_health_check=True,
        **options,
    )


# ---- config ------------------------------------------------------------------------------------------------


def test_config_validation_follows_nemo() -> None:
    base = {"input_jsonl_fpath": "in.jsonl", "output_jsonl_fpath": "out.jsonl"}
    assert collection.RolloutCollectionConfig(**base, agent_name="a").agent_map == {"_default": "a"}
    assert collection.RolloutCollectionConfig(**base, num_repeats=None).num_repeats == 1
    for bad, message in (
        ({"agent_name": "a", "agent_map": {"_default": "b"}}, "conflicts"),
        ({"num_repeats": 0}, "num_repeats"),
        ({"num_repeats": {"a": 2, "b": 0}}, "num_repeats"),
        ({"dispatch_budget_s": 60}, "num_samples_in_parallel"),
        ({"fan_out": {"a": []}}, "empty"),
        ({"fan_out": {"a": ["x", "x"]}}, "more than once"),
        ({"environment_routing_mode": "legacy"}, "environment_server_name"),
    ):
        with pytest.raises(ValidationError, match=message):
            collection.RolloutCollectionConfig(**base, **bad)
    explicit = collection.RolloutCollectionConfig.model_validate({**base, "retry_terminal_timeouts": False})
    assert "retry_terminal_timeouts" in explicit.model_fields_set
    assert "retry_invalid_judge_responses" not in explicit.model_fields_set


def test_rows_are_routed_indexed_and_repeated() -> None:
    examples = [
        {"agent_ref": {"name": "old"}, "q": 1},
        {"agent_ref": {"name": "fan"}, "q": 2},
        {"agent_ref": {"name": "old"}, "q": 1},
    ]
    with pytest.warns(UserWarning, match="agent_map overrode"):
        rows = collection.RolloutCollectionHelper().preprocess_examples(
            examples,
            agent_map={"old": "new"},
            fan_out={"fan": ["a", "b"]},
            num_repeats={"new": 2, "_default": 1},
            num_repeats_add_seed=True,
        )
    assert examples[0]["agent_ref"] == {"name": "old"}  # the caller's rows are not changed
    seen = [(r["agent_ref"]["name"], r["_ng_task_index"], r["_ng_rollout_index"]) for r in rows]
    # identical rows are one task: its repeats continue the numbering
    assert seen == [("new", 0, 0), ("new", 0, 1), ("a", 1, 0), ("b", 1, 1), ("new", 0, 2), ("new", 0, 3)]
    seeds = [json.loads(r["responses_create_params"]["metadata"]["extra_body"])["seed"] for r in rows]
    assert seeds == [r["_ng_rollout_index"] for r in rows]
    with pytest.raises(ValueError, match="No agent specified"):
        collection.RolloutCollectionHelper().preprocess_examples([{"q": 1}])


# ---- collection ---------------------------------------------------------------------------------------------


async def test_a_collection_writes_rollouts_inputs_and_metrics(servers: SimpleNamespace, tmp_path: Path) -> None:
    config = _config(tmp_path, [{"answer": "yes"}, {"answer": "no"}], num_repeats=2, num_samples_in_parallel=2)

    results = await collection.RolloutCollectionHelper().run_from_config(config)

    assert [(r["_ng_task_index"], r["_ng_rollout_index"], r["reward"]) for r in results] == [
        (0, 0, 1.0), (0, 1, 1.0), (1, 0, 0.0), (1, 1, 0.0)
    ]  # fmt: skip
    out = tmp_path / "out"
    assert sorted(r["_ng_rollout_index"] for r in _lines(out / "rollouts.jsonl")) == [0, 0, 1, 1]
    assert [r["agent_ref"] for r in _lines(out / "rollouts_materialized_inputs.jsonl")] == [{"name": "my_agent"}] * 4
    assert not _lines(out / "rollouts_failures.jsonl")
    metrics = json.loads((out / "rollouts_aggregate_metrics.json").read_text())
    assert metrics[0]["agent_ref"] == {"name": "my_agent"} and metrics[0]["key_metrics"] == {"mean/reward": 0.5}
    # the response's usage goes to /aggregate_metrics, its bulk does not
    assert servers.aggregated[0][0]["response"] == {"usage": {"total_tokens": 3}}


async def test_a_failed_run_goes_to_the_sidecar_only_when_asked(servers: SimpleNamespace, tmp_path: Path) -> None:
    rows = [{"answer": "yes"}, {"answer": "yes", "fail": "http"}]
    with pytest.raises(aiohttp.ClientResponseError):  # without the opt-in a failed /run ends the run
        await collection.RolloutCollectionHelper().run_from_config(_config(tmp_path, rows))

    await collection.RolloutCollectionHelper().run_from_config(_config(tmp_path, rows, route_failures_to_sidecar=True))

    out = tmp_path / "out"
    assert [r["_ng_task_index"] for r in _lines(out / "rollouts.jsonl")] == [0]
    (failure,) = _lines(out / "rollouts_failures.jsonl")
    assert failure["_ng_failure_class"] == "agent_run_error" and failure["_ng_failure_http_status"] == 500
    assert "did not collect a cohort" in failure["_ng_failure_response_body"]
    assert "reward" not in failure and failure["_ng_task_index"] == 1
    # the score covers the one rollout that produced a result
    assert json.loads((out / "rollouts_aggregate_metrics.json").read_text())[0]["key_metrics"] == {"mean/reward": 1.0}


async def test_a_run_without_any_result_fails_unless_failures_are_counted(
    servers: SimpleNamespace, tmp_path: Path
) -> None:
    rows = [{"answer": "yes", "fail": "judge"}]
    with pytest.raises(RuntimeError, match="None of the 2 dispatched rollouts produced a result"):
        await collection.RolloutCollectionHelper().run_from_config(_config(tmp_path, rows, num_repeats=2))
    out = tmp_path / "out"
    assert not (out / "rollouts_aggregate_metrics.json").exists()
    assert [r["_ng_failure_class"] for r in _lines(out / "rollouts_failures.jsonl")] == ["judge_failed"] * 2

    config = _config(tmp_path, rows, num_repeats=2, count_failure_classes_as_zero=["judge_failed"])
    await collection.RolloutCollectionHelper().run_from_config(config)
    online = json.loads((out / "rollouts_aggregate_metrics.json").read_text())
    assert online[0]["key_metrics"] == {"mean/reward": 0.0}
    # counted as zeros without their diagnostics, and unmasked
    assert all("failure_reason" not in r and r["mask_sample"] is False for r in servers.aggregated[-1])
    assert _lines(out / "rollouts.jsonl") == []

    offline = await collection.RolloutAggregationHelper().run_from_config(
        collection.RolloutAggregationConfig(
            input_glob=str(out / "rollouts.jsonl"),
            output_jsonl_fpath=str(tmp_path / "merged.jsonl"),
            count_failure_classes_as_zero=["judge_failed"],
            disable_health_check=True,
        )
    )
    assert json.loads(offline.read_text()) == online


async def test_resume_sends_only_what_is_owed_with_its_attempt(servers: SimpleNamespace, tmp_path: Path) -> None:
    rows = [{"answer": "yes"}, {"answer": "yes", "fail": "first"}]
    config = _config(tmp_path, rows, route_failures_to_sidecar=True)
    await collection.RolloutCollectionHelper().run_from_config(config)
    assert len(servers.runs) == 2

    config.resume_from_cache = True
    await collection.RolloutCollectionHelper().run_from_config(config)

    retried = servers.runs[2:]
    assert [(r["_ng_task_index"], r.get("_ng_attempt_index")) for r in retried] == [(1, 1)]
    done = _lines(tmp_path / "out" / "rollouts.jsonl")
    assert sorted(r["_ng_task_index"] for r in done) == [0, 1]
    # once everything succeeded, resuming sends nothing and keeps the file as it is
    await collection.RolloutCollectionHelper().run_from_config(config)
    assert len(servers.runs) == 3 and _lines(tmp_path / "out" / "rollouts.jsonl") == done


async def test_a_terminal_or_exhausted_failure_is_not_retried(
    servers: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEMO_GYM_MAX_ROLLOUT_ATTEMPTS", "2")
    config = _config(tmp_path, [{"fail": "http"}, {"answer": "yes"}], route_failures_to_sidecar=True)
    await collection.RolloutCollectionHelper().run_from_config(config)
    config.resume_from_cache = True
    await collection.RolloutCollectionHelper().run_from_config(config)
    await collection.RolloutCollectionHelper().run_from_config(config)
    assert [r["_ng_task_index"] for r in servers.runs] == [0, 1, 0]  # two attempts, then no more


async def test_rows_go_through_the_environment_server_in_front_of_their_agent(
    servers: SimpleNamespace, tmp_path: Path
) -> None:
    with serve_app_in_thread(_relay_app(servers, servers.agent_url)) as relay_url:
        set_server_urls({"my_env": relay_url})
        set_global_config(
            {
                "my_agent": {"responses_api_agents": {"simple_agent": {}}},
                "my_env": {"environment_servers": {"legacy_agent": {"agent_server": {"name": "my_agent"}}}},
            }
        )
        await collection.RolloutCollectionHelper().run_from_config(_config(tmp_path, [{"answer": "yes"}]))

    (row,) = _lines(tmp_path / "out" / "rollouts.jsonl")
    assert row["_ng_environment_server"] == "my_env" and row["_ng_result_type"] == "legacy_agent"
    assert servers.relayed == ["run", "aggregate_metrics"]


async def test_an_unknown_agent_fails_before_anything_is_sent(servers: SimpleNamespace, tmp_path: Path) -> None:
    config = collection.RolloutCollectionConfig(
        input_jsonl_fpath=str(_write(tmp_path / "in.jsonl", [{"agent_ref": {"name": "my_agnet"}}])),
        output_jsonl_fpath=str(tmp_path / "out.jsonl"),
    )
    with pytest.raises(ValueError, match="did you mean 'my_agent'"):
        await collection.RolloutCollectionHelper().run_from_config(config)
    assert servers.runs == []


async def test_the_server_client_can_be_replaced_on_the_module(
    servers: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As NeMo's tests do: patch ``setup_server_client_utils`` and the collector uses the given client."""
    from nemo_gym.server_utils import ServerClient

    client = ServerClient.model_construct(global_config_dict={"other": {"responses_api_agents": {"x": {}}}})
    client._server_base_urls["other"] = servers.agent_url
    monkeypatch.setattr(collection, "setup_server_client_utils", lambda *a, **k: client)
    config = _config(tmp_path, [{"answer": "yes"}]).model_copy(update={"agent_map": {"_default": "other"}})
    (result,) = await collection.RolloutCollectionHelper().run_from_config(config)
    assert result["agent_ref"] == {"name": "other"} and result["reward"] == 1.0


async def test_rows_the_dispatch_budget_never_started_are_written_nowhere(
    servers: SimpleNamespace, tmp_path: Path
) -> None:
    config = _config(tmp_path, [{"answer": "yes"}] * 2, dispatch_budget_s=0, num_samples_in_parallel=1)
    with pytest.raises(RuntimeError, match="2 of them were never started because dispatch_budget_s ran out"):
        await collection.RolloutCollectionHelper().run_from_config(config)
    out = tmp_path / "out"
    assert servers.runs == [] and _lines(out / "rollouts.jsonl") == [] and _lines(out / "rollouts_failures.jsonl") == []
    # still owed: a resumed run with time left sends them
    config = config.model_copy(update={"dispatch_budget_s": None, "resume_from_cache": True})
    assert len(await collection.RolloutCollectionHelper().run_from_config(config)) == 2


def _episode_app(state: SimpleNamespace) -> FastAPI:
    """An episode server: a materialized task in, a ``result`` (or a ``failure``) out."""
    app = FastAPI()

    @app.post("/run")
    async def run(request: Request) -> Any:
        body = await request.json()
        state.episodes.append(body)
        task = body["task"]
        answer = {"episode_id": body["episode_id"], "task_id": task["task_id"]}
        if task["task_input"].get("broken"):
            return {**answer, "failure": {"failure_reason": "sandbox did not start", "terminal": True}}
        return {**answer, "result": {"reward": 1.0, "steps": 3}}

    @app.post("/aggregate_metrics")
    async def aggregate(request: Request) -> Any:
        rows = (await request.json())["verify_responses"]
        return {"key_metrics": {"mean/reward": sum(r["reward"] for r in rows) / len(rows)}}

    return app


async def test_materialized_tasks_go_to_their_tasksets_environment_server(
    servers: SimpleNamespace, tmp_path: Path
) -> None:
    servers.episodes = []
    task = {"task_id": {"taskset": "puzzles", "task": "p1"}, "task_input": {"q": 1}}
    broken = {"task_id": {"taskset": "puzzles", "task": "p2"}, "task_input": {"q": 2, "broken": True}}
    with serve_app_in_thread(_episode_app(servers)) as url:
        set_server_urls({"puzzle_env": url})
        set_global_config({"puzzle_env": {"environment_servers": {"single_agent_turn": {}}}})
        config = collection.RolloutCollectionConfig(
            input_jsonl_fpath=str(_write(tmp_path / "tasks.jsonl", [task, broken])),
            output_jsonl_fpath=str(tmp_path / "rollouts.jsonl"),
            environment_server_routes={"puzzles": "puzzle_env"},
            disable_health_check=True,
        )
        await collection.RolloutCollectionHelper().run_from_config(config)

    assert [e["episode_id"] for e in servers.episodes] == [
        {"rollout_id": "0-0", "attempt": 0},
        {"rollout_id": "1-0", "attempt": 0},
    ]
    (result,) = _lines(tmp_path / "rollouts.jsonl")
    assert result["reward"] == 1.0 and result["_ng_task_id"] == task["task_id"]
    assert result["_ng_environment_server"] == "puzzle_env" and result["_ng_result_type"] == "single_agent_turn"
    (failure,) = _lines(tmp_path / "rollouts_failures.jsonl")
    assert failure["_ng_failure_class"] == "environment_server_failed" and failure["_ng_failure_terminal"] is True
    assert failure["_ng_failure_message"] == "sandbox did not start"


# ---- ng_perf ------------------------------------------------------------------------------------------------


def _trajectory() -> dict[str, Any]:
    call = {"model_call_id": "c1", "token_stats": {"prompt_tokens": 10, "completion_tokens": 4}}
    return {
        "task_id": "t",
        "rollout_id": "r",
        "invocations": [
            {"invocation_id": "root", "model_calls": [{"model_call_id": "c1"}, {"model_call_id": "missing"}]},
            {"invocation_id": "sub", "model_calls": [{"model_call_id": "c1"}]},  # the same call, owned once
        ],
        "model_calls": [call],
        "tool_calls": [],
    }


def test_ng_perf_sums_each_owned_call_once() -> None:
    result = {"ng_trajectory": _trajectory()}
    collection._attach_ng_perf(result, observability_enabled=True, rollout_latency_ms=12.5)
    assert result["ng_perf"] == {
        "num_turns": 2,  # root: one owned call; sub: none owned, still one turn
        "num_tool_calls": 0,
        "token_observability_coverage": 0.5,
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "total_latency_ms": 12.5,
    }


def test_ng_perf_is_absent_without_observability_or_trajectory() -> None:
    off = {"ng_trajectory": _trajectory()}
    collection._attach_ng_perf(off, observability_enabled=False)
    bare: dict[str, Any] = {"reward": 1.0}
    collection._attach_ng_perf(bare, observability_enabled=True)
    assert "ng_perf" not in off and "ng_perf" not in bare
