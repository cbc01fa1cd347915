"""A scripted judge for replaying NeMo Gym environments offline (``tools/nemo_envs.py`` starts it): the app of
``ngym scripted-judge`` (``ngym.rollout.fixed_judge``), on a given port.

Replaying a judge environment's example rollouts needs a judge; the recorded rows do not hold what the judge
said. With the same scripted verdict on both sides (NeMo Gym's own ``ServerClient`` in
``nemo_replay_inprocess.py``, ``ngym run --model-url NAME=URL`` under ngym), both run the environment's whole
verify path (prompt building, the HTTP call, parsing the verdict, the reward) and must agree.

    python tools/nemo_scripted_judge.py PORT "[[A=B]]"
"""

from __future__ import annotations

import sys

from ngym.rollout.fixed_judge import create_judge_app

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(create_judge_app(sys.argv[2]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
