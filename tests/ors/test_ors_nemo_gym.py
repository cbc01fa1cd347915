"""A NeMo Gym 0.7.0 environment (its own code, from NeMo Gym's wheel) over ORS with openreward's own client.

NeMo Gym's ``example_session_state_mgmt`` keeps each rollout's counter in the server's own dict, keyed by
``request.session["session_id"]``: in-process state, reached over ORS through the same ngym session as over NeMo
Gym's wire. Its recorded example rollouts score the same on both.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ngym_nemo_gym.catalogue import wheel as nemo_wheel

from ngym.examples import EXAMPLE_ROWS, read_example_rollouts, read_jsonl, recorded_tool_calls
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.testing import app_for

from .test_ors_client import _final_text, _live_sessions, _nemo_rewards, drive

NAME = "example_session_state_mgmt"


def test_a_nemo_gym_environment_scores_the_same_over_ors(ors_python: Path, tmp_path: Path) -> None:
    folder = nemo_wheel.extract_environment(NAME, tmp_path / "nemo")  # NeMo Gym 0.7.0's own code
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
    app = app_for(str(folder / "app.py"), domain="agent")  # NeMo Gym declares it in its config
    with serve_app_in_thread(app) as url:
        nemo = asyncio.run(_nemo_rewards(url, rollouts))
        name = app.title
        seen = drive(ors_python, {"url": f"{url}/ors/", "env_name": name, "split": "example", "episodes": episodes})
        assert _live_sessions(url) == 0
    assert seen["num_tasks"] == len(rows)
    assert {"increment_counter", "get_counter_value", "submit_answer"} <= set(seen["tools"])
    assert [e["final"]["reward"] for e in seen["episodes"]] == nemo == [r["reward"] for r in rollouts]
