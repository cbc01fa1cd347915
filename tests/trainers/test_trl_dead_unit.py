"""TRL's ``GRPOTrainer`` on a fleet blend whose environment dies mid-run, and beside a capacity-limited one.

A fleet (``ngym up``, local engine: each environment behind its HAProxy front) serves the weather example with
``max_sessions: 2`` (fewer than GRPO's ``num_generations`` = 4) and workplace_assistant; TRL trains on both as a
blend (``ngym.train.trl.fleet``), one environment per optimizer step in turn. After step 2's sessions are seeded,
workplace_assistant's unit is killed (``kill -9`` of its ``ngym run``): its front answers 503 from then on. Checked:

- training goes on to its last step (a seed refused because the environment is down or full does not stop TRL);
- every sample whose environment was gone or full has **no reward** (None, left out by TRL), never 0.0, although
  the weather's verify reads only the trajectory and would have scored the same calls 1.0 had they been verified;
- every other reward TRL logged equals ``/verify``'s over NeMo Gym's wire for the same trajectory, and each
  logged mean is the mean of the rewarded samples alone.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ngym.fleet.state import FleetState
from tests.trainers.test_trl import BUILTIN, N, drive, wire_reward

WEATHER_ROLLOUTS = BUILTIN / "example_single_tool_call/data/example_rollouts.jsonl"
WORKPLACE_ROLLOUTS = BUILTIN / "workplace_assistant/data/example_rollouts.jsonl"
CAPACITY = 2  # the weather's max_sessions: two of each group of four are refused


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FleetState]]:
    work = tmp_path_factory.mktemp("dead-unit")
    spec = {
        "name": "trl-dead-unit",
        "head_server": {"port": 0},
        "engine": "local",
        "environments": {
            "weather": {"env": "example_single_tool_call", "config": {"max_sessions": CAPACITY}},
            "workplace": "workplace_assistant",
        },
    }
    path = work / "fleet.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k != "NGYM_STRICT_PLUGINS"}
    ngym = [str(Path(os.sys.executable)), "-m", "ngym.cli"]
    up = subprocess.run([*ngym, "up", str(path)], capture_output=True, text=True, timeout=600, env=env, cwd=work)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = FleetState.load(work / ".ngym-fleet" / "trl-dead-unit")
        assert state is not None
        yield f"http://127.0.0.1:{state.head.port}", state
    finally:
        subprocess.run([*ngym, "down", str(path)], capture_output=True, timeout=120, env=env, cwd=work)


def test_a_dead_or_full_environment_is_no_reward_and_training_goes_on(
    trainer_python: Path, fleet: tuple[str, FleetState], tmp_path: Path
) -> None:
    head, state = fleet
    victim = state.servers["workplace"].process
    assert victim is not None
    run: dict[str, Any] = {
        "label": "dead-unit",
        "fleet": head,
        "environments": {
            "weather": {"rollouts": str(WEATHER_ROLLOUTS)},
            "workplace": {"rollouts": str(WORKPLACE_ROLLOUTS)},
        },
        "interleave": True,  # steps 1, 3: weather; 2, 4: workplace
        "max_steps": 4,
        "kill": {"step": 1, "pid": victim.pid},  # after step 2's sessions are seeded
        "output_dir": str(tmp_path / "out"),
    }
    result = drive(trainer_python, [run], tmp_path)["dead-unit"]
    assert result["global_step"] == 4, result["global_step"]
    assert [b.get("killed") for b in result["batches"]] == [None, victim.pid, None, None]
    urls = result["urls"]
    rewarded: dict[int, list[float]] = {}
    for step in range(1, 5):
        group = [s for s in result["samples"] if s["step"] == step]
        assert len(group) == N and {s["environment"] for s in group} == {"weather" if step % 2 else "workplace"}
        for index, sample in enumerate(group):
            tool_messages = [m["content"] for m in sample["completion"] if m["role"] == "tool"]
            if step % 2 == 0:  # workplace: its unit died under step 2's rollouts, step 4's seeds found it gone
                assert sample["reward"] is None, sample
                continue
            if index >= CAPACITY:  # the weather was full: not seeded, the tool not run, no reward
                assert sample["reward"] is None, sample
                if tool_messages:  # the group's last generation calls no tool
                    assert all("not run" in text for text in tool_messages), tool_messages
                    replayed, masked, _ = wire_reward(urls["weather"], sample["row"], sample["completion"])
                    assert replayed == 1.0 and not masked  # what verifying it anyway would have given
                continue
            reward, masked, outputs = wire_reward(urls["weather"], sample["row"], sample["completion"])
            assert not masked and outputs == tool_messages
            assert sample["reward"] == reward, (sample, reward)
            rewarded.setdefault(step, []).append(reward)
    for step, logged in enumerate(result["logged_means"], 1):
        if step in rewarded:
            assert math.isclose(logged, sum(rewarded[step]) / len(rewarded[step]), abs_tol=1e-6)
        else:  # no sample of the step had a reward: TRL logged none (NaN), not a 0.0
            assert logged is None or math.isnan(logged), (step, logged)
    assert result["live_sessions_after"]["weather"] == 0
