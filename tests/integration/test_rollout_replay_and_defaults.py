"""``ngym rollout`` as a new user meets it: the replay model against a URL, progress in a log, default data."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request

from ngym.examples import read_jsonl
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.targets import resolve
from ngym.testing import app_for

WEATHER = "example_single_tool_call"


def _weather_data() -> Path:
    folder = resolve(WEATHER).folder
    assert folder is not None
    return folder / "data"


def _recorded_rewards() -> list[float]:
    return [float(row["reward"]) for row in read_jsonl(_weather_data() / "example_rollouts.jsonl")]


def _rollout(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "ngym.cli", "rollout", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_replay_model_with_a_url_target_replays_the_recordings_beside_data(tmp_path: Path) -> None:
    with serve_app_in_thread(app_for(WEATHER)) as url:
        done = _rollout(url, "--data", str(_weather_data() / "example.jsonl"), "--model", "replay",
                        "--output", str(tmp_path / "o.jsonl"), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    recorded = _recorded_rewards()  # the weather examples hold a 0.0 (no get_weather call) beside the 1.0s
    assert summary["done"] == len(recorded) and summary["failed"] == []
    assert summary["mean_reward"] == pytest.approx(sum(recorded) / len(recorded))
    written = sorted(read_jsonl(tmp_path / "o.jsonl"), key=lambda line: line["_ng_task_index"])
    assert [line["reward"] for line in written] == recorded


def test_replay_data_names_the_recordings_and_no_recording_is_one_clear_error(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    shutil.copy(_weather_data() / "example.jsonl", data)  # no example_rollouts.jsonl beside it
    with serve_app_in_thread(app_for(WEATHER)) as url:
        missing = _rollout(url, "--data", str(data), "--model", "replay", "--output", str(tmp_path / "a.jsonl"))
        given = _rollout(url, "--data", str(data), "--model", "replay", "--output", str(tmp_path / "b.jsonl"),
                         "--replay-data", str(_weather_data() / "example_rollouts.jsonl"), "--json")  # fmt: skip
    assert missing.returncode == 2
    lines = missing.stderr.strip().splitlines()
    assert len(lines) == 1 and "the replay model has no recording for any row of --data" in lines[0]
    assert "--replay-data" in lines[0]
    assert given.returncode == 0, given.stderr
    assert json.loads(given.stdout)["done"] == len(_recorded_rewards())


def _slow_model() -> FastAPI:
    """Answers every request with a final message, after a pause (long enough for progress lines)."""
    app = FastAPI()

    @app.post("/v1/responses")
    async def responses(request: Request) -> Any:
        body = await request.json()
        await asyncio.sleep(0.4)
        message = {"type": "message", "id": "m", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "sunny", "annotations": []}]}  # fmt: skip
        return {"id": "r", "object": "response", "created_at": 0.0, "model": body.get("model", "m"),
                "output": [message], "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "status": "completed"}  # fmt: skip

    return app


def test_without_a_terminal_progress_is_printed_as_plain_lines(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"responses_create_params": {"input": "weather?"}}) + "\n")
    with serve_app_in_thread(app_for(WEATHER)) as env, serve_app_in_thread(_slow_model()) as model:
        done = _rollout(env, "--data", str(data), "--model-url", f"{model}/v1", "--model", "m", "--repeats", "3",
                        "--concurrency", "1", "--output", str(tmp_path / "o.jsonl"),
                        env={"NGYM_PROGRESS_SECONDS": "0.3"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stderr.splitlines() if "rollouts: " in line]
    assert progress and all(line.startswith("  … rollouts: ") for line in progress), done.stderr
    assert any("/3 done" in line for line in progress)
    assert "3 rollouts written" in done.stdout


def test_without_data_an_installed_environment_rolls_out_its_own_example_data(tmp_path: Path) -> None:
    """``ngym rollout NAME --model replay`` needed ``--data`` even when install wrote example data (issue 24)."""
    done = _rollout(WEATHER, "--model", "replay", "--output", str(tmp_path / "o.jsonl"), "--json")
    assert done.returncode == 0, done.stderr
    named = [line for line in done.stderr.splitlines() if "no --data" in line]
    assert named == [f"ngym: no --data: rolling out {WEATHER}'s example data, {_weather_data() / 'example.jsonl'}"]
    summary = json.loads(done.stdout)
    recorded = _recorded_rewards()
    assert summary["done"] == len(recorded) and summary["failed"] == []
    assert summary["mean_reward"] == pytest.approx(sum(recorded) / len(recorded))


def test_without_data_nothing_to_default_to_is_one_line_asking_for_data(tmp_path: Path) -> None:
    folder = tmp_path / "bare_env"
    (folder / "configs").mkdir(parents=True)
    (folder / "app.py").write_text(
        "from ngym.plugin_api import SimpleResourcesServer\n\n\nclass Bare(SimpleResourcesServer):\n    pass\n"
    )
    config = folder / "configs" / "bare_env.yaml"
    config.write_text("bare_env:\n  resources_servers:\n    bare_env:\n      entrypoint: app.py\n      domain: games\n")
    bare = _rollout(str(config), "--model", "replay", "--output", str(tmp_path / "a.jsonl"))
    url = _rollout("http://127.0.0.1:9", "--model", "replay", "--output", str(tmp_path / "b.jsonl"))
    for done, why in ((bare, "ships no example data"), (url, "give --data")):
        assert done.returncode == 2, done.stdout + done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and why in lines[0] and "Traceback" not in done.stderr, done.stderr
