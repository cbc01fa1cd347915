"""Drive an ngym server with TRL's ORS binding, ``trl.experimental.openreward.OpenRewardSpec`` (trl 1.16.0), doing
what ``GRPOTrainer`` does with its three slots: read ``train_dataset``, build environments with
``environment_factory``, ``reset`` one per rollout, call the bound tool methods the model's tool calls name, and
score with ``reward_funcs``. Runs in the trainer venv (tools/trainer_venv.sh); plan on stdin, what it saw on stdout:

    {"url": "http://127.0.0.1:PORT/ors/", "env_name": "...", "split": "example",
     "episodes": [{"index": 0, "calls": [["get_weather", {"city": "Oslo"}]], "answer": "It is cold."}]}
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main(plan: dict[str, Any]) -> dict[str, Any]:
    os.environ["OPENREWARD_API_URL"] = plan["url"]
    os.environ["OPENREWARD_SESSION_URL"] = plan["url"]
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.openreward import OpenRewardSpec

    indices = sorted({e["index"] for e in plan["episodes"]})
    spec = OpenRewardSpec(plan["url"].rstrip("/"), env_name=plan["env_name"], split=plan["split"], indices=indices)
    dataset = spec.train_dataset
    factory = spec.environment_factory
    environments, prompts, outputs = [], [], []
    for episode in plan["episodes"]:
        env = factory()
        prompts.append(env.reset(task_index=episode["index"]))
        seen = [getattr(env, name)(**arguments) for name, arguments in episode["calls"]]
        seen.append(env.submit_answer(answer=episode["answer"]))
        outputs.append(seen)
        environments.append(env)
    rewards = spec.reward_funcs(environments=environments)
    for env in environments:
        env._close()
    return {
        "dataset_rows": len(dataset),
        "dataset_columns": dataset.column_names,
        "task_index": list(dataset["task_index"]),
        "tools": sorted(n for n in vars(type(environments[0])) if not n.startswith("_")) if environments else [],
        "prompts": prompts,
        "outputs": outputs,
        "rewards": rewards,
        "finished": [env.finished for env in environments],
    }


if __name__ == "__main__":
    json.dump(main(json.load(sys.stdin)), sys.stdout)
