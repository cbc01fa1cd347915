"""verl 0.9.1's own config loader and tool classes drive environments served by ``ngym run`` (real processes) through
their recorded rollouts: the tool config comes from ``ngym train verl-tools URL``; rewards equal the recorded reward
and NeMo's wire ``/verify`` of the same trajectory; no session is left after ``release``; rollouts run at once
never see one another's state; a masked result is no reward (``None``), never 0.0."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("verl_driver.py")


def recorded(name: str) -> list[dict[str, Any]]:
    lines = (ROOT / "resources_servers" / name / "data" / "example_rollouts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def wire_reward(url: str, rollout: dict[str, Any]) -> float:
    """NeMo's wire, as its agent speaks it: seed with the row, the recorded calls, /verify the recorded response."""
    row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
    with httpx.Client(base_url=url, timeout=60) as http:
        seeded = http.post("/seed_session", json=row)
        cookie = {"cookie": seeded.headers["set-cookie"].split(";", 1)[0]}
        for item in rollout["response"]["output"]:
            if item.get("type") == "function_call":
                http.post(f"/{item['name']}", json=json.loads(item["arguments"]), headers=cookie)
        verified = http.post("/verify", json={**row, "response": rollout["response"]}, headers=cookie).json()
        http.post("/close_session", json={}, headers=cookie)
    return float(verified["reward"])


def parsed(outputs: list[str]) -> list[Any]:
    """Tool outputs as values (the recording's JSON may be spaced differently from the server's)."""
    values = []
    for text in outputs:
        try:
            values.append(json.loads(text))
        except ValueError:
            values.append(text)
    return values


def live_sessions(url: str) -> int:
    return int(httpx.get(f"{url}/health", timeout=30).json()["live_sessions"])


def tool_config(url: str, path: Path) -> dict[str, Any]:
    """``ngym train verl-tools URL -o PATH``, the command a user runs."""
    done = subprocess.run(
        [sys.executable, "-m", "ngym.cli", "train", "verl-tools", url, "-o", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import yaml

    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


@pytest.mark.parametrize("name", ["example_single_tool_call", "workplace_assistant", "example_session_state_mgmt"])
def test_verl_tools_replay_recorded_rollouts(
    name: str, serve: Callable[[str], str], in_verl: Callable[..., Any], tmp_path: Path
) -> None:
    url = serve(name)
    rollouts = recorded(name)
    config = tool_config(url, tmp_path / "tools.yaml")
    answer = in_verl(DRIVER, {"mode": "replay", "config": str(tmp_path / "tools.yaml"), "rollouts": rollouts})

    assert answer["classes"] == ["ngym.train.verl.NgymTool"] and answer["all_base_tools"]
    assert sorted(answer["schemas"]) == sorted(t["tool_schema"]["function"]["name"] for t in config["tools"])
    rewards = [r["reward"] for r in answer["results"]]
    assert rewards == [r["reward"] for r in rollouts]
    assert rewards == [wire_reward(url, r) for r in rollouts]
    for result in answer["results"]:
        assert parsed(result["outputs"]) == parsed(result["recorded_outputs"])  # the model saw what the recording saw
        assert all(step is None for step in result["step_rewards"])  # no step reward invented
    assert live_sessions(url) == 0


def test_verl_tools_parallel_rollouts_are_isolated(
    serve: Callable[[str], str], in_verl: Callable[..., Any], tmp_path: Path
) -> None:
    """The counter keeps per-session state: run all at once (x4), each rollout still sees its own counter (the
    outputs of its get_counter_value calls) and scores its recorded reward."""
    url = serve("example_session_state_mgmt")
    rollouts = recorded("example_session_state_mgmt") * 4
    tool_config(url, tmp_path / "tools.yaml")
    answer = in_verl(
        DRIVER, {"mode": "replay", "parallel": True, "config": str(tmp_path / "tools.yaml"), "rollouts": rollouts}
    )
    assert [r["reward"] for r in answer["results"]] == [r["reward"] for r in rollouts]
    assert [parsed(r["outputs"]) for r in answer["results"]] == [
        parsed(r["recorded_outputs"]) for r in answer["results"]
    ]
    assert live_sessions(url) == 0


def test_verl_tools_masked_result_is_no_reward(
    serve: Callable[[str], str], in_verl: Callable[..., Any], tmp_path: Path
) -> None:
    """A session the server lost before calc_reward: verify masks it (session_lost); the tool says None, not 0.0;
    verl's reward function (compute_score) raises, or gives NaN when asked to."""
    url = serve("example_session_state_mgmt")
    rollouts = [r for r in recorded("example_session_state_mgmt") if r["reward"] == 1.0]
    tool_config(url, tmp_path / "tools.yaml")
    answer = in_verl(DRIVER, {"mode": "masked", "config": str(tmp_path / "tools.yaml"), "rollouts": rollouts})
    assert answer == {"reward": None, "mask_sample": True, "failure_kind": "session_lost"}

    scored = in_verl(DRIVER, {"mode": "score", "url": url, "rollouts": rollouts})
    assert "session_lost" in scored["raise"]["raised"]
    assert scored["nan"] == {"score": None, "nan": True}
    assert scored["kept"] == 1.0
    assert live_sessions(url) == 0


def test_verl_tools_concurrent_creates_of_one_instance_share_its_fate(
    serve: Callable[[str], str], in_verl: Callable[..., Any], tmp_path: Path
) -> None:
    """All of a rollout's tools create its instance at once (one seeds, the others wait for that seed). A row the
    environment refuses (422) fails every create and leaves nothing behind; an environment that cannot be reached
    gives every create the instance, whose call is not run and whose reward is None (not a score)."""
    url = serve("example_session_state_mgmt")
    config = tool_config(url, tmp_path / "tools.yaml")
    assert len(config["tools"]) >= 2
    row = dict(recorded("example_session_state_mgmt")[0])
    row.pop("response"), row.pop("reward")
    refused = in_verl(
        DRIVER, {"mode": "concurrent", "config": str(tmp_path / "tools.yaml"), "row": {**row, "initial_count": "x"}}
    )
    assert refused == {"creates": ["WireError"] * len(config["tools"]), "left": 0}, refused
    from ngym.child_server import free_port

    gone = tmp_path / "gone.yaml"
    gone.write_text((tmp_path / "tools.yaml").read_text().replace(url, f"http://127.0.0.1:{free_port()}"))
    answer = in_verl(DRIVER, {"mode": "concurrent", "config": str(gone), "row": row, "arguments": {"count": 1}})
    assert answer["creates"] == ["ok"] * len(config["tools"]), answer
    assert "not run" in answer["output"] and answer["reward"] is None and answer["left"] == 0, answer
    assert live_sessions(url) == 0
