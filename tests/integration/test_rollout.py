"""``ngym rollout`` end to end over real HTTP: a scripted model that misbehaves, the replay model, --resume."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ngym.rollout.runner import REPLAY, RolloutOptions, run_rollouts
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.targets import installed_names, resolve
from ngym.testing import app_for, read_jsonl

#: Where the built-in environments live: the folders `make install` installs in editable mode.
BUILTINS = Path(__file__).resolve().parents[2] / "resources_servers"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _response(body: dict[str, Any], output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "resp_scripted",
        "object": "response",
        "created_at": 0.0,
        "model": body.get("model", "scripted"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.get("tools", []),
        "status": "completed",
    }


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name, "arguments": arguments}


def scripted_model() -> tuple[FastAPI, list[dict[str, Any]]]:
    """A Responses-API model: HTTP 500 once, then three bad tool calls and one good one, then an answer."""
    app = FastAPI()
    seen: list[dict[str, Any]] = []

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        body = await request.json()
        seen.append(body)
        if len(seen) == 1:
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=500, headers={"retry-after-ms": "10"})
        outputs = [i for i in body["input"] if i.get("type") == "function_call_output"]
        if not outputs:
            return _response(
                body,
                [
                    _call("c1", "get_weather", '{"city": "Paris"'),  # malformed JSON
                    _call("c2", "launch_rockets", '{"count": 3}'),  # not a declared tool
                    _call("c3", "get_weather", "{}"),  # the tool answers 422 (city missing)
                    _call("c4", "get_weather", '{"city": "Oslo"}'),
                ],
            )
        text = "It is cold in Oslo." if len(outputs) == 4 else f"unexpected: {len(outputs)} outputs"
        message = {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        return _response(body, [message])

    return app, seen


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_scripted_model_errors_are_in_the_trajectory_and_the_retry_is_visible(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    row = {"responses_create_params": {"input": "Weather in Oslo?", "tools": [WEATHER_TOOL]}}
    data = _write_rows(tmp_path / "rows.jsonl", [row])
    model_app, seen = scripted_model()
    caplog.set_level(logging.INFO, logger="openai._base_client")
    with serve_app_in_thread(model_app) as model_url, serve_app_in_thread(app_for("example_single_tool_call")) as env:
        options = RolloutOptions(
            target=env, data=data, model_url=f"{model_url}/v1", model="scripted", output=tmp_path / "out.jsonl"
        )
        summary = run_rollouts(options)

    assert summary.done == 1 and not summary.failed
    [result] = read_jsonl(tmp_path / "out.jsonl")
    assert result["reward"] == 1.0
    info = result["rollout_info"]
    assert info["model_retries"] == 1 and info["model_calls"] == 2 and info["tool_calls"] == 4
    assert info["stop_reason"] == "final_message"
    kinds = {e["call_id"]: e["kind"] for e in info["tool_errors"]}
    assert kinds == {"c1": "bad_arguments", "c2": "unknown_tool", "c3": "http_status"}
    assert "Retrying request" in caplog.text  # the openai client's retry, in the log

    outputs = {i["call_id"]: i["output"] for i in result["response"]["output"] if i["type"] == "function_call_output"}
    assert "not valid JSON" in json.loads(outputs["c1"])["error"]
    assert "unknown tool 'launch_rockets'" in json.loads(outputs["c2"])["error"]
    assert json.loads(outputs["c3"])["detail"][0]["loc"][-1] == "city"  # the raw 422 body, as NeMo Gym stores it
    assert json.loads(outputs["c4"])["weather_description"] == "The weather in Oslo is cold."
    # The model saw every one of those outputs on its next call.
    assert [i["output"] for i in seen[-1]["input"] if i.get("type") == "function_call_output"] == list(outputs.values())
    assert result["response"]["output"][-1]["content"][0]["text"] == "It is cold in Oslo."
    metrics = json.loads(summary.metrics_path.read_text())
    assert metrics["agent_metrics"]["mean/reward"] == 1.0


def _builtins_with_examples() -> list[str]:
    """The built-in environments (this repository's resources_servers/) that ship example rollouts. Only these:
    whatever else is installed beside ngym (NeMo Gym's math_with_judge needs a judge, wordle generated data)
    is the user's, and the project's own suite must pass with it installed."""
    names = []
    for name in installed_names():
        folder = resolve(name).folder
        if folder is None or not folder.resolve().is_relative_to(BUILTINS):
            continue
        if (folder / "data" / "example_rollouts.jsonl").is_file():
            names.append(name)
    return names


@pytest.mark.parametrize("name", _builtins_with_examples())
def test_replay_model_reproduces_recorded_rewards(name: str, tmp_path: Path) -> None:
    """The built-ins' example rollouts, replayed by the replay model through the agent loop over HTTP."""
    folder = resolve(name).folder
    assert folder is not None
    examples = folder / "data" / "example_rollouts.jsonl"
    fields: dict[str, Any] = {}
    with serve_app_in_thread(_replay_app(examples)) as replay_url:
        if "judge_base_url" in (folder / "configs" / f"{name}.yaml").read_text():
            fields["judge_base_url"] = f"{replay_url}/v1"
        with serve_app_in_thread(app_for(name, **fields)) as env:
            options = RolloutOptions(
                target=env, data=examples, model_url=f"{replay_url}/v1", model="replay", output=tmp_path / "o.jsonl"
            )
            options.model = "replay-remote"  # a model name that is not the in-process shortcut
            summary = run_rollouts(options)
    assert not summary.failed
    got = {r["_ng_task_index"]: r["reward"] for r in read_jsonl(tmp_path / "o.jsonl")}
    assert got == {i: r["reward"] for i, r in enumerate(read_jsonl(examples))}


def _replay_app(examples: Path) -> FastAPI:
    from ngym.rollout.replay_model import create_replay_app

    return create_replay_app(read_jsonl(examples))


def test_cli_by_name_with_replay_model_and_resume(tmp_path: Path) -> None:
    """`ngym rollout NAME --model replay` starts the environment itself; --resume skips the rows already done."""
    folder = resolve("example_session_state_mgmt").folder
    assert folder is not None
    data = folder / "data" / "example.jsonl"
    output = tmp_path / "out.jsonl"
    command = [sys.executable, "-m", "ngym.cli", "rollout", "example_session_state_mgmt", "--data", str(data)]
    command += ["--model", "replay", "--repeats", "2", "--output", str(output), "--json"]
    first = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["done"] == 10 and summary["skipped"] == 0 and summary["mean_reward"] == 1.0

    lines = output.read_text().splitlines()
    kept = lines[:7]
    output.write_text("\n".join(kept) + "\n")
    again = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    resumed = json.loads(again.stdout)
    assert resumed["done"] == 3 and resumed["skipped"] == 7
    pairs = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in read_jsonl(output)]
    assert sorted(pairs) == [(t, k) for t in range(5) for k in range(2)]
    metrics = json.loads((tmp_path / "out.metrics.json").read_text())
    assert metrics["agent_metrics"]["num_rollouts"] == 10


def test_resume_after_a_kill_mid_line_loses_no_result(tmp_path: Path) -> None:
    """A run killed while writing left a torn last line: --resume drops it and runs that rollout again, and the
    next result is not glued to it (which made that line unreadable: out of the metrics, run again next time)."""
    examples = BUILTINS / "example_single_tool_call" / "data" / "example_rollouts.jsonl"
    output = tmp_path / "out.jsonl"
    with (
        serve_app_in_thread(_replay_app(examples)) as replay_url,
        serve_app_in_thread(app_for("example_single_tool_call")) as env,
    ):
        options = RolloutOptions(target=env, data=examples, model_url=f"{replay_url}/v1", model="replay-remote")
        options.output, options.concurrency = output, 1
        first = run_rollouts(options)
        lines = output.read_bytes().splitlines(keepends=True)
        output.write_bytes(b"".join(lines[:-1]) + lines[-1][:25])  # the last result cut short, no newline
        options.resume = True
        resumed = run_rollouts(options)
    assert (resumed.done, resumed.skipped) == (1, first.done - 1)
    results = read_jsonl(output)  # every line is whole JSON again
    assert sorted(r["_ng_task_index"] for r in results) == list(range(first.done))
    assert resumed.aggregate_metrics["agent_metrics"]["num_rollouts"] == first.done


def test_model_down_fails_the_rollout_with_one_clear_error(tmp_path: Path) -> None:
    from ngym.child_server import free_port

    row = {"responses_create_params": {"input": "hi", "tools": [WEATHER_TOOL]}}
    data = _write_rows(tmp_path / "rows.jsonl", [row])
    with serve_app_in_thread(app_for("example_single_tool_call")) as env:
        options = RolloutOptions(
            target=env,
            data=data,
            model_url=f"http://127.0.0.1:{free_port()}/v1",
            model="m",
            max_retries=0,
            output=tmp_path / "out.jsonl",
        )
        summary = run_rollouts(options)
    assert summary.done == 0 and len(summary.failed) == 1
    assert "cannot reach the model server" in summary.failed[0]["error"]


def test_servers_never_import_openai() -> None:
    code = (
        "import sys; from ngym.testing import app_for; import ngym.cli.run;"
        "[app_for(n) for n in ('example_single_tool_call', 'equivalence_llm_judge')];"
        "assert 'openai' not in sys.modules, 'openai imported at server start-up'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_concurrent_rollouts_keep_their_sessions_apart(tmp_path: Path) -> None:
    """20 stateful rollouts at once: each carries only its own cookie (no shared jar mixing sessions up)."""
    folder = resolve("example_session_state_mgmt").folder
    assert folder is not None
    examples = folder / "data" / "example_rollouts.jsonl"
    with (
        serve_app_in_thread(_replay_app(examples)) as replay_url,
        serve_app_in_thread(app_for("example_session_state_mgmt")) as env,
    ):
        options = RolloutOptions(
            target=env,
            data=examples,
            model_url=f"{replay_url}/v1",
            model="replay-remote",
            repeats=4,
            concurrency=20,
            output=tmp_path / "o.jsonl",
        )
        summary = run_rollouts(options)
    assert summary.done == 20 and summary.mean_reward == 1.0


def test_nothing_at_the_environment_url_is_one_error_line_before_any_rollout(tmp_path: Path) -> None:
    from ngym.child_server import free_port

    data = _write_rows(tmp_path / "rows.jsonl", [{"responses_create_params": {"input": "hi"}}] * 3)
    url = f"http://127.0.0.1:{free_port()}"
    command = [sys.executable, "-m", "ngym.cli", "rollout", url, "--data", str(data), "--model", "replay"]
    done = subprocess.run([*command, "--output", str(tmp_path / "o.jsonl")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == done.stderr.strip().splitlines()[0]  # one line: no progress bar, no warnings
    assert done.stderr.startswith(f"ngym: error: no environment answers at {url}")


def test_a_row_without_input_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from ngym.errors import ConfigError

    data = _write_rows(
        tmp_path / "rows.jsonl", [{"responses_create_params": {"input": "hi"}}, {"responses_create_params": {}}]
    )
    with pytest.raises(ConfigError, match="row 2 needs responses_create_params with an input"):
        run_rollouts(RolloutOptions(target="example_single_tool_call", data=data, model=REPLAY))


def test_a_model_error_page_becomes_a_one_line_failure(tmp_path: Path) -> None:
    from fastapi.responses import HTMLResponse

    page = FastAPI()

    @page.post("/v1/responses")
    async def not_a_model() -> HTMLResponse:
        return HTMLResponse("<html>\n  <body>\n    <h1>404 Not Found</h1>\n  </body>\n</html>\n", status_code=404)

    data = _write_rows(tmp_path / "rows.jsonl", [{"responses_create_params": {"input": "hi"}}])
    with serve_app_in_thread(page) as model_url, serve_app_in_thread(app_for("example_single_tool_call")) as env:
        options = RolloutOptions(target=env, data=data, model_url=f"{model_url}/v1", model="m", output=tmp_path / "o")
        summary = run_rollouts(options)
    [failure] = summary.failed
    assert (
        failure["error"].startswith("model server answered HTTP 404") and "<h1>404 Not Found</h1>" in failure["error"]
    )
    assert "\n" not in failure["error"]
