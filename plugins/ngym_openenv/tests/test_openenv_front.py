"""OpenEnv's own code (``openenv==0.10.0`` from the package index, in its cached venv) against ngym's ``/openenv``.

- ``openenv validate --url http://HOST:PORT/openenv --json`` passes every check on every built-in served by
  ``ngym run``;
- OpenEnv's ``GenericEnvClient`` and ``MCPToolClient`` drive built-ins' recorded rollouts (all of an
  environment's episodes at once: one connection and one session each) to the rewards NeMo Gym's wire gives
  the same trajectories, and leave no session live.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ngym_nemo_gym.catalogue.wheel import extract_environment

from ngym.child_server import free_port, stop_process, wait_healthy
from ngym.examples import dataset_row, read_example_rollouts, recorded_tool_calls
from ngym.rollout.replay_model import create_replay_app
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.server.protocol import Response
from ngym.targets import resolve

DRIVER = Path(__file__).with_name("front_driver.py")
BUILTINS = [
    "example_single_tool_call",
    "example_session_state_mgmt",
    "workplace_assistant",
    "math_with_code",
    "equivalence_llm_judge",
]


def _rollouts(name: str, folder: Path | None = None) -> list[dict[str, Any]]:
    folder = folder or resolve(name).folder
    assert folder is not None
    return read_example_rollouts(folder / "data" / "example_rollouts.jsonl")


@contextlib.contextmanager
def _ngym_run(name: str, target: str | None = None, cwd: Path | None = None) -> Iterator[str]:
    """``ngym run NAME`` (or ``target``) in a process of its own (a judge environment's judge: the scripted one, in
    a thread)."""
    with contextlib.ExitStack() as stack:
        extra: list[str] = []
        folder = resolve(name).folder if target is None else None
        if folder is not None and "judge_base_url" in (folder / "configs" / f"{name}.yaml").read_text():
            judge = stack.enter_context(serve_app_in_thread(create_replay_app(_rollouts(name))))
            extra = [f"judge_base_url={judge}/v1"]
        served = subprocess.Popen(
            [sys.executable, "-m", "ngym.cli", "run", target or name, "--port", "0", *extra],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "NGYM_DEBUG": "1"},
        )
        try:
            assert served.stdout is not None
            url, seen = "", []
            deadline = time.monotonic() + 120
            while not url and time.monotonic() < deadline and served.poll() is None:
                line = served.stdout.readline()
                seen.append(line)
                if f"serving {name}" in line:
                    url = line.split(" at ")[1].split()[0]
            assert url, "ngym run did not say where it serves:\n" + "".join(seen[-30:])
            yield url.rstrip("/")
        finally:
            served.terminate()
            served.wait(30)


def _live_sessions(url: str) -> int:
    live: int = httpx.get(f"{url}/health", timeout=30).json()["live_sessions"]
    return live


def _episodes(rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "reset": {"row": dataset_row(r)},
            "steps": [{"tool_name": c.name, "arguments": c.arguments} for c in recorded_tool_calls(r["response"])],
            "final": Response.model_validate(r["response"]).final_text(),
        }
        for r in rollouts
    ]


def _drive(python: str, url: str, client: str, episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    request = json.dumps({"url": url, "client": client, "episodes": episodes})
    result = subprocess.run([python, str(DRIVER)], input=request, capture_output=True, text=True, timeout=300)
    line = next((x for x in reversed(result.stdout.splitlines()) if x.startswith("FRONT ")), None)
    assert result.returncode == 0 and line, f"driver failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    answer: list[dict[str, Any]] = json.loads(line.removeprefix("FRONT "))
    return answer


def _nemo_wire_rewards(url: str, rollouts: list[dict[str, Any]]) -> list[Any]:
    """NeMo Gym's wire on the same server: seed, the recorded tool calls, verify with the recorded response."""
    rewards = []
    with httpx.Client(base_url=url, timeout=120) as http:
        for rollout in rollouts:
            row = dataset_row(rollout)
            seed = http.post("/seed_session", json=row)
            cookie = {"cookie": seed.headers["set-cookie"].split(";")[0]}
            for call in recorded_tool_calls(rollout["response"]):
                http.post(f"/{call.name}", json=call.arguments, headers=cookie)
            rewards.append(
                http.post("/verify", json={**row, "response": rollout["response"]}, headers=cookie).json()["reward"]
            )
    return rewards


@pytest.mark.parametrize("name", BUILTINS)
def test_openenv_validate_and_generic_client_on_every_builtin(name: str, openenv_python: str) -> None:
    rollouts = _rollouts(name)
    with _ngym_run(name) as url:
        openenv = Path(openenv_python).with_name("openenv")
        validated = subprocess.run(
            [str(openenv), "validate", "--url", f"{url}/openenv", "--json"], capture_output=True, text=True, timeout=120
        )
        report = json.loads(validated.stdout)
        assert validated.returncode == 0 and report["passed"], report
        assert report["summary"]["passed_count"] == report["summary"]["total_count"] == 6, report["summary"]
        nemo = _nemo_wire_rewards(url, rollouts)
        front = _drive(openenv_python, f"{url}/openenv", "generic", _episodes(rollouts))
        assert _live_sessions(url) == 0
    assert [e["reward"] for e in front] == nemo == [r["reward"] for r in rollouts]
    assert all(e["done"] for e in front)


@pytest.mark.parametrize("name", ["workplace_assistant", "example_session_state_mgmt"])
def test_openenv_mcp_client_scores_as_nemo_wire(name: str, openenv_python: str) -> None:
    rollouts = _rollouts(name)
    with _ngym_run(name) as url:
        nemo = _nemo_wire_rewards(url, rollouts)
        front = _drive(openenv_python, f"{url}/openenv", "mcp", _episodes(rollouts))
        assert _live_sessions(url) == 0
    assert [e["reward"] for e in front] == nemo == [r["reward"] for r in rollouts]
    assert all("final_answer" in e["tools"] for e in front)


def test_a_nemo_gym_environment_with_in_process_state(openenv_python: str, tmp_path: Path) -> None:
    """NeMo Gym 0.7.0's own example_session_state_mgmt (its code from the nemo-gym wheel, unchanged: a counter per
    session in a dict on the server), served by ``ngym run`` through ngym-nemo-gym: OpenEnv's generic and MCP
    clients score its recorded rollouts as NeMo Gym's wire does, all episodes at once."""
    name = "example_session_state_mgmt"
    folder = extract_environment(name, tmp_path)
    rollouts = _rollouts(name, folder)
    config = folder / "configs" / f"{name}.yaml"
    with _ngym_run(f"{name}_resources_server", target=str(config), cwd=tmp_path) as url:
        validated = subprocess.run(
            [str(Path(openenv_python).with_name("openenv")), "validate", "--url", f"{url}/openenv", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert json.loads(validated.stdout)["summary"]["passed_count"] == 6, validated.stdout
        nemo = _nemo_wire_rewards(url, rollouts)
        generic = _drive(openenv_python, f"{url}/openenv", "generic", _episodes(rollouts))
        mcp = _drive(openenv_python, f"{url}/openenv", "mcp", _episodes(rollouts))
        assert _live_sessions(url) == 0
    assert [e["reward"] for e in generic] == [e["reward"] for e in mcp] == nemo == [r["reward"] for r in rollouts]


# --- the front's error cases against OpenEnv's own server (create_app/HTTPEnvServer) ------------------------------

PROBE = Path(__file__).with_name("conformance_probe.py")
TALLY = Path(__file__).with_name("envs") / "tally_env"
#: where the front answers otherwise, on purpose (docs/protocols.md, "Differences from OpenEnv's server"):
DELIBERATE = {
    # OpenEnv's HTTP /step runs a fresh environment per request; an ngym episode is a seeded session: /reset first
    "step before reset": ({"status": 200}, {"status": 409, "detail": "str"}),
    # OpenEnv answers an unknown MCP tool with "internal error"; the front with MCP's "invalid params"
    "mcp tools/call unknown tool": ({"status": 200, "rpc_error": -32603}, {"status": 200, "rpc_error": -32602}),
    # OpenEnv's WebSocket session holds an environment from the start; an ngym episode starts at its reset
    "ws step before reset": ({"type": "observation", "code": None}, {"type": "error", "code": "VALIDATION_ERROR"}),
}


@contextlib.contextmanager
def _openenv_server(python: str) -> Iterator[str]:
    """OpenEnv's own server (``create_app``, as ``openenv init`` lays it out) for the tally environment."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="openenv-reference-") as folder:
        log = Path(folder) / "server.log"
        with log.open("wb") as sink:
            served = subprocess.Popen(
                [python, "-m", "uvicorn", "server.app:app", "--port", str(port), "--log-level", "warning"],
                cwd=TALLY,
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, served, 120, log)  # raises with the log's tail if it exits or never answers
            yield url
        finally:
            stop_process(served)


def _probe(python: str, url: str, action: dict[str, Any]) -> dict[str, dict[str, Any]]:
    done = subprocess.run([python, str(PROBE), url, json.dumps(action)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {case.pop("label"): case for case in json.loads(done.stdout.strip().splitlines()[-1])}


def test_error_cases_are_answered_as_openenv_s_server_answers_them(openenv_python: str) -> None:
    """Step before reset, unknown action fields, bodies that are not JSON, /state before reset, MCP tools/list and
    an unknown tool, an unknown WebSocket message type, a step after close: the same statuses and error codes as
    OpenEnv's own server, but for the differences listed in ``DELIBERATE``."""
    with _openenv_server(openenv_python) as reference:
        expected = _probe(openenv_python, reference, {"type": "call_tool", "tool_name": "add", "arguments": {"n": 2}})
    with _ngym_run("example_single_tool_call") as url:
        action = {"type": "call_tool", "tool_name": "get_weather", "arguments": {"city": "SF"}}
        answered = _probe(openenv_python, f"{url}/openenv", action)
        assert _live_sessions(url) == 0
    assert list(answered) == list(expected)
    for label, theirs in expected.items():
        if label in DELIBERATE:
            assert (theirs, answered[label]) == DELIBERATE[label], label
        else:
            assert answered[label] == theirs, (label, theirs, answered[label])
