"""``openreward``'s own client (the ORS SDK, 0.1.167 from the package index) against every built-in environment.

Each built-in is served for real (uvicorn on a socket); its recorded example rollouts are replayed twice on the same
server: through NeMo Gym's wire (seed, the recorded tool calls, verify with the recorded response) and through the
ORS client (a session on the row, the same tool calls, the recorded final message as the final answer). The
tasks, tools and rewards the client sees must be the environment's, and the rewards equal; a failed judge reaches
the client as no reward (None); parallel sessions keep their own state; every ngym session is closed after.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from ngym.examples import EXAMPLE_ROWS, read_example_rollouts, read_jsonl, recorded_tool_calls
from ngym.rollout.replay_model import create_replay_app
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.targets import resolve
from ngym.testing import RolloutClient, app_for, run_recorded_rollout

DRIVER = Path(__file__).with_name("ors_driver.py")
TRL_DRIVER = Path(__file__).with_name("trl_spec_driver.py")
BUILTINS = [
    "example_single_tool_call",
    "example_session_state_mgmt",
    "workplace_assistant",
    "math_with_code",
    "equivalence_llm_judge",
]


def drive(python: Path, plan: dict[str, Any], driver: Path = DRIVER) -> dict[str, Any]:
    """Run the ORS client on ``plan`` (tests/ors/ors_driver.py, or ``driver``) in the ORS venv; what it saw."""
    done = subprocess.run(
        [str(python), str(driver)], input=json.dumps(plan), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


@contextmanager
def served(name: str, **fields: Any) -> Iterator[str]:
    """The environment served on a socket (with the scripted judge when it grades with one); its URL."""
    folder = resolve(name).folder
    assert folder is not None
    examples = folder / "data" / "example_rollouts.jsonl"
    with serve_app_in_thread(create_replay_app(read_jsonl(examples))) as judge_url:
        if "judge_base_url" in (folder / "configs" / f"{name}.yaml").read_text() and "judge_base_url" not in fields:
            fields["judge_base_url"] = f"{judge_url}/v1"
        with serve_app_in_thread(app_for(name, **fields)) as url:
            yield url


def _final_text(response: dict[str, Any]) -> str:
    messages = [item for item in response["output"] if item.get("type") == "message"]
    return "".join(part.get("text", "") for part in messages[-1]["content"]) if messages else ""


async def _nemo_rewards(url: str, rollouts: list[dict[str, Any]]) -> list[float]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        return [(await run_recorded_rollout(RolloutClient(http), rollout))["reward"] for rollout in rollouts]


def _live_sessions(url: str) -> int:
    return int(httpx.get(f"{url}/health", timeout=30).json()["live_sessions"])


@pytest.mark.parametrize("name", BUILTINS)
def test_ors_client_sees_the_environment_and_scores_as_nemo_gyms_wire(name: str, ors_python: Path) -> None:
    folder = resolve(name).folder
    assert folder is not None
    rollouts = read_example_rollouts(folder / "data" / "example_rollouts.jsonl")
    rows = read_jsonl(folder / "data" / EXAMPLE_ROWS)
    with served(name) as url:
        nemo = asyncio.run(_nemo_rewards(url, rollouts))
        episodes = [
            {
                "index": rows.index({k: v for k, v in r.items() if k not in ("response", "reward")}),
                "calls": [[c.name, c.arguments] for c in recorded_tool_calls(r["response"])],
                "answer": _final_text(r["response"]),
            }
            for r in rollouts
        ]
        seen = drive(ors_python, {"url": f"{url}/ors/", "env_name": name, "split": "example", "episodes": episodes})
        assert _live_sessions(url) == 0

    assert "example" in seen["splits"]
    assert seen["num_tasks"] == len(rows) and seen["tasks"] == rows
    assert seen["terminal_tool"] == "submit_answer" and "submit_answer" in seen["tools"]
    for episode, rollout, nemo_reward, plan in zip(seen["episodes"], rollouts, nemo, episodes, strict=True):
        assert all(o.get("finished") is False and o.get("reward") is None for o in episode["outputs"]), episode
        assert {c[0] for c in plan["calls"]} <= set(episode["task_tools"])
        assert episode["final"]["finished"] is True
        assert episode["final"]["reward"] == nemo_reward == rollout["reward"], (episode, nemo_reward)


def test_parallel_ors_sessions_are_isolated(ors_python: Path) -> None:
    """Eight sessions of the counter at once, each adding its own amounts: each ends at its own expected count."""
    base = {"responses_create_params": {"input": "Add, then say the value."}}
    episodes = [
        {
            "task_spec": {**base, "initial_count": i, "expected_count": i + 3 * i},
            "calls": [["increment_counter", {"count": i}]] * 3 + [["get_counter_value", {}]],
            "answer": str(4 * i),
        }
        for i in range(8)
    ]
    with served("example_session_state_mgmt") as url:
        seen = drive(
            ors_python,
            {"url": f"{url}/ors/", "env_name": "example_session_state_mgmt", "split": "example",
             "episodes": episodes, "parallel": True},
        )  # fmt: skip
        assert _live_sessions(url) == 0
    assert len({e["sid"] for e in seen["episodes"]}) == 8
    for i, episode in enumerate(seen["episodes"]):
        assert json.loads(episode["outputs"][-1]["text"]) == {"count": 4 * i}
        assert episode["final"]["reward"] == 1.0


def test_a_failed_judge_reaches_the_ors_client_as_no_reward(ors_python: Path) -> None:
    with served("equivalence_llm_judge", judge_base_url="http://127.0.0.1:9/v1", judge_timeout_seconds=2) as url:
        seen = drive(
            ors_python,
            {"url": f"{url}/ors/", "env_name": "equivalence_llm_judge", "split": "example",
             "episodes": [{"index": 0, "answer": "Paris"}]},
        )  # fmt: skip
        assert _live_sessions(url) == 0
    final = seen["episodes"][0]["final"]
    assert final["finished"] is True and final["reward"] is None and final["metadata"]["mask_sample"] is True


def test_bad_tool_input_reaches_the_ors_client_as_its_error(ors_python: Path) -> None:
    """A tool call the route refuses (422) and an unknown tool: the client's ToolCallError with ORS's reason and
    the route's message; after the final answer, a call is refused as episode_finished."""
    with served("example_single_tool_call") as url:
        seen = drive(
            ors_python,
            {"url": f"{url}/ors/", "env_name": "example_single_tool_call", "split": "example",
             "episodes": [{"index": 0, "calls": [["get_weather", {"town": "Oslo"}], ["launch", {}]], "answer": "x",
                           "after_finish": ["get_weather", {"city": "Oslo"}]}]},
        )  # fmt: skip
        assert _live_sessions(url) == 0
    bad, unknown = seen["episodes"][0]["outputs"]
    assert bad["error"] == "ToolCallError" and bad["reason"] == "input_validation" and "city" in bad["detail"]
    assert unknown["reason"] == "not_found" and "get_weather" in unknown["detail"]
    assert seen["episodes"][0]["after_finish"]["reason"] == "episode_finished"


@pytest.mark.parametrize("name", BUILTINS)
def test_trl_openreward_spec_trains_on_what_nemo_gyms_wire_scores(name: str, ors_python: Path) -> None:
    """TRL's OpenRewardSpec pointed at the server's /ors, used as GRPOTrainer uses it (dataset, one environment per
    rollout, the model's tool calls as method calls, reward_funcs): its rewards are NeMo Gym's wire's."""
    folder = resolve(name).folder
    assert folder is not None
    rollouts = read_example_rollouts(folder / "data" / "example_rollouts.jsonl")
    rows = read_jsonl(folder / "data" / EXAMPLE_ROWS)
    episodes = [
        {
            "index": rows.index({k: v for k, v in r.items() if k not in ("response", "reward")}),
            "calls": [[c.name, c.arguments] for c in recorded_tool_calls(r["response"])],
            "answer": _final_text(r["response"]),
        }
        for r in rollouts
    ]
    with served(name) as url:
        nemo = asyncio.run(_nemo_rewards(url, rollouts))
        plan = {"url": f"{url}/ors/", "env_name": name, "split": "example", "episodes": episodes}
        seen = drive(ors_python, plan, TRL_DRIVER)
        assert _live_sessions(url) == 0
    assert seen["dataset_rows"] == len({e["index"] for e in episodes})
    assert "submit_answer" in seen["tools"]
    assert seen["rewards"] == nemo == [r["reward"] for r in rollouts]
    assert all(seen["finished"])
