"""TRL 1.16's own ``GRPOTrainer``, unmodified, trains on ngym environments through ``ngym.train.trl``.

Three environments — the weather example, workplace_assistant, and NeMo Gym 0.7.0's own
example_session_state_mgmt (in-process state; ``ngym install nemo-gym:...``) — each served by ``ngym run`` and
all three by one fleet (``ngym up``, the local engine, trained as a blend). The trainer runs in the trainer venv
(tests/trainers/trl_driver.py) with a tiny model whose ``generate`` replays a recorded rollout's tool calls (the
last generation of each group answers without a tool, so rewards differ and GRPO updates the model): TRL parses
them, the environment runs them. Checked here, over NeMo Gym's wire directly (no ngym.train code):

- TRL trained ≥ 2 optimizer steps with a nonzero gradient, and each completion's tool calls ran in ngym
  (replaying them in a fresh session gives the same tool outputs);
- the tools TRL describes to the model are the rows' declared tools;
- every reward TRL logged equals ``/verify``'s reward for the same trajectory, and TRL's logged mean is their mean;
- a rollout whose session was closed under it (NeMo's counter, whose verify reads the session) is excluded by TRL
  (``None`` → NaN), never scored 0.0;
- a batch of N generations is N distinct sessions live at once, and no session is left after training.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from ngym_nemo_gym.catalogue.wheel import nemo_gym_wheel

from ngym.child_server import EnvironmentStartError, free_port, wait_healthy
from ngym.fleet.isolation import ensure_venv
from ngym.fleet.state import FleetState

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("trl_driver.py")
BUILTIN = REPO / "resources_servers"
NEMO_COUNTER = "nemo-gym:example_session_state_mgmt"
SUBMIT_TOOL = "submit_answer"  # the ORS front's final-answer tool
N = 4  # generations per prompt (GRPO's group): one optimizer step's batch


@pytest.fixture(scope="module")
def nemo_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """NeMo Gym 0.7.0's example_session_state_mgmt installed (``ngym install nemo-gym:... --as nemo_counter``) in
    the cached virtualenv a fleet gives it (its own packages first, so NeMo's package, not the built-in of the same
    name, is imported); (that venv's python, the environment to run it with, the recorded rollouts it ships)."""
    work = tmp_path_factory.mktemp("nemo")
    python = ensure_venv([f"{NEMO_COUNTER} --as nemo_counter"], work / "venv.log")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "NGYM_STRICT_PLUGINS")}
    # The recorded rollouts NeMo Gym ships with it, from the same wheel `ngym install` took the environment from.
    # Its collector kept only the prompt of each row: the row's other fields (initial_count, expected_count) are
    # taken back from its example.jsonl, matched by prompt.
    folder = "resources_servers/example_session_state_mgmt/data/"
    with zipfile.ZipFile(nemo_gym_wheel()) as wheel:
        rows = [json.loads(line) for line in wheel.read(folder + "example.jsonl").decode().splitlines() if line]
        recorded = [json.loads(line) for line in wheel.read(folder + "example_rollouts.jsonl").decode().splitlines()]
    by_prompt = {json.dumps(r["responses_create_params"]["input"][-1]["content"]): r for r in rows}
    lines = []
    for rollout in recorded:
        row = by_prompt[json.dumps(rollout["responses_create_params"]["input"][-1]["content"])]
        lines.append(json.dumps({**row, **rollout}))
    rollouts = work / "nemo_counter_rollouts.jsonl"
    rollouts.write_text("\n".join(lines) + "\n")
    return python, env, rollouts


@pytest.fixture(scope="module")
def served(
    nemo_env: tuple[Path, dict[str, str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[str, Path]]]:
    """``ngym run`` of each environment: name → (url, recorded rollouts)."""
    python, env, nemo_rollouts = nemo_env
    work = tmp_path_factory.mktemp("served")
    wanted = {
        "weather": ("example_single_tool_call", BUILTIN / "example_single_tool_call/data/example_rollouts.jsonl"),
        "workplace": ("workplace_assistant", BUILTIN / "workplace_assistant/data/example_rollouts.jsonl"),
        "nemo_counter": ("nemo_counter", nemo_rollouts),
    }
    servers: list[subprocess.Popen[str]] = []
    out: dict[str, tuple[str, Path]] = {}
    try:
        for name, (target, rollouts) in wanted.items():
            port = free_port()
            cmd = [str(python), "-m", "ngym.cli", "run", target, "--port", str(port)]
            # Not from the checkout: `python -m` puts the working directory first on sys.path, and the checkout's
            # resources_servers/ would shadow NeMo Gym's package of the same name.
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=work)
            servers.append(proc)
            url = f"http://127.0.0.1:{port}"
            try:
                wait_healthy(url, proc, 120, path="/")
            except EnvironmentStartError as exc:
                proc.kill()
                raise AssertionError(f"{cmd}: {exc}: {proc.communicate()[0]}") from None
            out[name] = (url, rollouts)
        yield out
    finally:
        for proc in servers:
            proc.terminate()
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, nemo_env: tuple[Path, dict[str, str], Path]) -> Iterator[str]:
    """The same three environments as one fleet (``ngym up``, local engine); its head server's URL."""
    python, env, _ = nemo_env
    work = tmp_path_factory.mktemp("fleet")
    spec = {
        "name": "trl",
        "head_server": {"port": 0},
        "engine": "local",
        "environments": {
            "weather": "example_single_tool_call",
            "workplace": "workplace_assistant",
            "nemo_counter": NEMO_COUNTER,
        },
    }
    path = work / "fleet.yaml"
    path.write_text(yaml.safe_dump(spec))
    fleet_env = env  # the fleet's nemo_counter reuses the venv nemo_env made (same cache, same lines)
    up = subprocess.run(
        [str(python), "-m", "ngym.cli", "up", str(path)],
        capture_output=True,
        text=True,
        timeout=900,
        env=fleet_env,
        cwd=work,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = FleetState.load(work / ".ngym-fleet" / "trl")
        assert state is not None
        yield f"http://127.0.0.1:{state.head.port}"
    finally:
        subprocess.run(
            [str(python), "-m", "ngym.cli", "down", str(path)],
            capture_output=True,
            timeout=120,
            env=fleet_env,
            cwd=work,
        )


def drive(trainer_python: Path, runs: list[dict[str, Any]], work: Path) -> dict[str, dict[str, Any]]:
    spec, out = work / "spec.json", work / "out.json"
    spec.write_text(json.dumps({"runs": runs}))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        [str(trainer_python), str(DRIVER), str(spec), str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
        cwd=work,
    )
    assert done.returncode == 0, done.stderr[-6000:]
    return {result["label"]: result for result in json.loads(out.read_text())}


# --- NeMo Gym's wire, directly (the reference the rewards TRL logged are checked against) -----------------------


class WireSession:
    def __init__(self, url: str) -> None:
        self.url, self.cookie = url, ""

    def post(self, path: str, body: Any) -> httpx.Response:
        response = httpx.post(f"{self.url}{path}", json=body, headers={"cookie": self.cookie}, timeout=120)
        if "set-cookie" in response.headers:
            self.cookie = response.headers["set-cookie"].split(";")[0]
        return response


def wire_reward(url: str, row: dict[str, Any], completion: list[dict[str, Any]]) -> tuple[float, bool, list[str]]:
    """Replay the completion's tool calls in a fresh session and verify its trajectory: (reward, masked, outputs)."""
    session = WireSession(url)
    assert session.post("/seed_session", row).status_code == 200
    output: list[dict[str, Any]] = []
    outputs: list[str] = []
    calls = 0
    finished = False  # over ORS, the final-answer tool ends the episode: what follows is not scored
    for message in completion:
        if message["role"] == "assistant" and not finished:
            if message.get("content"):
                output.append(
                    {
                        "type": "message",
                        "id": f"m{calls}",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": message["content"], "annotations": []}],
                    }
                )
            for call in message.get("tool_calls") or []:
                function = call["function"]
                if function["name"] == SUBMIT_TOOL:  # ORS's final-answer tool: NeMo's wire has the answer as text
                    text = function["arguments"]["answer"]
                    output.append(
                        {
                            "type": "message",
                            "id": "final",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": text, "annotations": []}],
                        }
                    )
                    finished = True
                    break
                call_id = f"c{calls}"
                calls += 1
                answer = session.post(f"/{function['name']}", function["arguments"])
                outputs.append(answer.text)
                output += [
                    {
                        "type": "function_call",
                        "name": function["name"],
                        "arguments": json.dumps(function["arguments"]),
                        "call_id": call_id,
                        "id": f"f{call_id}",
                        "status": "completed",
                    },
                    {"type": "function_call_output", "call_id": call_id, "output": answer.text},
                ]
    params = row["responses_create_params"]
    response = {
        "id": "r",
        "created_at": time.time(),
        "model": "wire",
        "object": "response",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": params.get("tools") or [],
        "status": "completed",
    }
    verified = session.post("/verify", {**row, "response": response}).json()
    return float(verified["reward"]), bool(verified.get("mask_sample")), outputs


def declared(rollouts: Path) -> dict[str, dict[str, Any]]:
    """The function tools the rows declare (NeMo Gym's wire hands these to the model), by name."""
    tools: dict[str, dict[str, Any]] = {}
    for line in rollouts.read_text().splitlines():
        for tool in json.loads(line)["responses_create_params"].get("tools") or []:
            tools.setdefault(tool["name"], tool)
    return tools


def check_tools(result: dict[str, Any], rollouts: dict[str, Path]) -> None:
    """The tools TRL shows the model are the declared ones: names, parameters, required ones, descriptions."""
    for env, schemas in result["tool_schemas"].items():
        expected = declared(rollouts[env] if env in rollouts else next(iter(rollouts.values())))
        assert sorted(s["name"] for s in schemas) == sorted(expected)
        for schema in schemas:
            tool = expected[schema["name"]]
            assert " ".join(tool.get("description", "").split()) in schema["description"]
            properties = tool["parameters"].get("properties") or {}
            assert sorted(schema["parameters"].get("properties") or {}) == sorted(properties)
            assert sorted(schema["parameters"].get("required") or []) == sorted(
                tool["parameters"].get("required") or []
            )


def check_run(result: dict[str, Any], urls: dict[str, str], masked: tuple[int, int] | None) -> None:
    assert result["global_step"] >= 2, result["global_step"]
    samples = result["samples"]
    assert len(samples) == N * result["global_step"]
    # N generations = N sessions at once: seeded by reset before the batch is generated, each its own cookie.
    for batch in result["batches"]:
        assert len(set(batch["cookies"])) == N and all(batch["cookies"]), batch
        assert sum(v for v in batch["live_sessions"].values()) == N, batch
    by_step: dict[int, list[dict[str, Any]]] = {}
    for sample in samples:
        by_step.setdefault(sample["step"], []).append(sample)
    excluded = 0
    for step, group in sorted(by_step.items()):
        measured = []
        for index, sample in enumerate(group):
            tool_messages = [m["content"] for m in sample["completion"] if m["role"] == "tool"]
            # the scripted policy calls the recorded tools, but for the group's last generation (no tool at all)
            assert bool(tool_messages) == (index != N - 1), sample["completion"]
            reward, was_masked, outputs = wire_reward(urls[sample["environment"]], sample["row"], sample["completion"])
            assert not was_masked
            if masked == (step - 1, index):
                # its session was closed under it: the tool answered 410 and TRL got no reward, not a 0.0
                assert sample["reward"] is None, sample
                assert any("session_lost" in text for text in tool_messages), tool_messages
                excluded += 1
                continue
            assert outputs == tool_messages, (outputs, tool_messages)
            assert sample["reward"] == reward, (sample["reward"], reward, sample["completion"])
            measured.append(reward)
        logged = result["logged_means"][step - 1]
        assert math.isclose(logged, sum(measured) / len(measured), abs_tol=1e-6), (logged, measured)
    assert excluded == (1 if masked else 0)
    assert any(norm > 0 for norm in result["grad_norms"]), result["grad_norms"]  # TRL updated the model
    assert all(v == 0 for v in result["live_sessions_after"].values()), result["live_sessions_after"]


@pytest.fixture(scope="module")
def results(
    trainer_python: Path,
    served: dict[str, tuple[str, Path]],
    fleet: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, dict[str, Any]]:
    work = tmp_path_factory.mktemp("trl")
    runs: list[dict[str, Any]] = []
    for name, (url, rollouts) in served.items():
        run: dict[str, Any] = {
            "label": name,
            "environments": {name: {"url": url, "rollouts": str(rollouts)}},
            "output_dir": str(work / name),
        }
        if name == "nemo_counter":  # the weather's and workplace's verify read only the trajectory, not the session
            run["mask"] = {"step": 1, "index": 2}
        runs.append(run)
    runs.append(
        {
            "label": "fleet",
            "fleet": fleet,
            "environments": {name: {"rollouts": str(rollouts)} for name, (_, rollouts) in served.items()},
            "interleave": True,
            "max_steps": 3,
            "mask": {"step": 2, "index": 0},  # the third step's environment is nemo_counter
            "output_dir": str(work / "fleet"),
        }
    )
    return drive(trainer_python, runs, work)


@pytest.mark.parametrize("name", ["weather", "workplace", "nemo_counter"])
def test_grpo_trainer_on_ngym_run(
    name: str, results: dict[str, dict[str, Any]], served: dict[str, tuple[str, Path]]
) -> None:
    masked = (1, 2) if name == "nemo_counter" else None
    check_tools(results[name], {name: served[name][1]})
    check_run(results[name], {name: served[name][0]}, masked)


def test_grpo_trainer_on_a_fleet_blend(results: dict[str, dict[str, Any]], served: dict[str, tuple[str, Path]]) -> None:
    result = results["fleet"]
    assert sorted(result["tool_schemas"]) == sorted(served)  # each environment of the blend its own tools
    check_tools(result, {name: rollouts for name, (_, rollouts) in served.items()})
    assert {s["environment"] for s in result["samples"]} == {"weather", "workplace", "nemo_counter"}
    assert [s["environment"] for s in result["samples"]][2 * N] == "nemo_counter"
    check_run(result, result["urls"], (2, 0))


# --- TRL's own OpenRewardSpec against the ORS front (/ors) of the same servers ----------------------------------

ORS_ENVIRONMENTS = {"weather": "example_single_tool_call", "workplace": "workplace_assistant"}


@pytest.fixture(scope="module")
def ors_results(
    trainer_python: Path, served: dict[str, tuple[str, Path]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    work = tmp_path_factory.mktemp("trl_ors")
    runs = [
        {
            "label": name,
            # as docs/training.md writes it (include_metadata=False: rows of differing shapes are no Arrow table)
            "ors": {
                "url": f"{served[name][0]}/ors",
                "env_name": env_name,
                "split": "example",
                "options": {"include_metadata": False},
            },
            "environments": {name: {"url": served[name][0], "rollouts": str(served[name][1])}},
            "output_dir": str(work / name),
        }
        for name, env_name in ORS_ENVIRONMENTS.items()
    ]
    return drive(trainer_python, runs, work)


@pytest.mark.parametrize("name", sorted(ORS_ENVIRONMENTS))
def test_grpo_trainer_with_openrewardspec(
    name: str, ors_results: dict[str, dict[str, Any]], served: dict[str, tuple[str, Path]]
) -> None:
    """GRPOTrainer with TRL's OpenRewardSpec, unchanged: the scripted model calls the recorded tools, then the
    front's final-answer tool; every reward TRL logged equals /verify's over NeMo Gym's wire."""
    result = ors_results[name]
    assert result["global_step"] >= 2
    assert len(result["samples"]) == N * result["global_step"]
    for batch in result["batches"]:  # N generations = N ORS sessions = N ngym sessions, live at once
        assert sum(batch["live_sessions"].values()) == N, batch
    for step, logged in enumerate(result["logged_means"], 1):
        group = [s for s in result["samples"] if s["step"] == step]
        rewards = []
        for index, sample in enumerate(group):
            calls = [c["function"]["name"] for m in sample["completion"] for c in m.get("tool_calls") or []]
            assert calls[-1] == SUBMIT_TOOL and (len(calls) > 1) == (index != N - 1), calls
            reward, masked, outputs = wire_reward(served[name][0], sample["row"], sample["completion"])
            assert not masked
            tool_messages = [m["content"] for m in sample["completion"] if m["role"] == "tool"]
            assert outputs == tool_messages[:-1]  # the tools ran in ngym; the last is the episode's end
            assert sample["reward"] == reward, (sample["reward"], reward, sample["completion"])
            rewards.append(reward)
        assert math.isclose(logged, sum(rewards) / len(rewards), abs_tol=1e-6)
    assert any(norm > 0 for norm in result["grad_norms"])
    assert all(v == 0 for v in result["live_sessions_after"].values()), result["live_sessions_after"]
