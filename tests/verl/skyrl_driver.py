"""Runs in the trainer venv (skyrl-gym 0.4.0 there) with the checkout on PYTHONPATH: skyrl-gym's own ``make`` and a
step loop as SkyRL's generator runs it (init, then step on each model turn until done, then close) drive an ngym
server through recorded rollouts. JSON payload on stdin; prints ``NGYM-RESULT <json>``.

Each recorded model turn becomes the text a model would write: its ``function_call``s as ``<tool_call>`` blocks
(Hermes/Qwen format), its final message as plain text. ``lose_session``: close the session behind the
environment's back before the final answer (a masked verify follows).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import httpx
import skyrl_gym

import ngym.train.skyrl  # noqa: F401  (registers "ngym" with skyrl_gym)


def turns(output: list[dict[str, Any]]) -> list[str]:
    actions: list[str] = []
    current: list[str] = []
    for item in output:
        if item.get("type") == "function_call":
            call = {"name": item["name"], "arguments": json.loads(item["arguments"])}
            current.append(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
        elif item.get("type") == "function_call_output":
            if current:
                actions.append("\n".join(current))
                current = []
        elif item.get("type") == "message":
            current.append("".join(part.get("text", "") for part in item.get("content", [])))
    if current:
        actions.append("\n".join(current))
    return actions


def play(url: str, rollout: dict[str, Any], lose_session: bool, on_masked: str) -> dict[str, Any]:
    row = {k: v for k, v in rollout.items() if k not in ("response", "reward")}
    env = skyrl_gym.make("ngym", env_config={"url": url, "on_masked": on_masked}, extras={"ngym_row": json.dumps(row)})
    prompt = [{"role": "user", "content": "recorded"}]
    observations, _info = env.init(prompt)
    seen: list[str] = []
    reward: Any = None
    done = False
    error = None
    try:
        actions = turns(rollout["response"]["output"])
        for number, action in enumerate(actions):
            if lose_session and number == len(actions) - 1:
                cookie = "; ".join(f"{k}={v}" for k, v in env.rollout.cookies.items())
                httpx.post(f"{url}/close_session", json={}, headers={"cookie": cookie}).raise_for_status()
            out = env.step(action)
            seen += [o["content"] for o in out["observations"]]
            reward, done = out["reward"], out["done"]
            if done:
                break
    except Exception as exc:  # the masked case raises by default
        error = f"{type(exc).__name__}: {exc}"
    finally:
        env.close()
    if isinstance(reward, float) and math.isnan(reward):
        reward = "nan"
    return {"reward": reward, "done": done, "outputs": seen, "error": error, "metrics": env.get_metrics()}


def main() -> None:
    payload = json.load(sys.stdin)
    results = [
        play(payload["url"], r, bool(payload.get("lose_session")), payload.get("on_masked", "raise"))
        for r in payload["rollouts"]
    ]
    print("NGYM-RESULT " + json.dumps({"results": results, "registered": "ngym" in skyrl_gym.registry}))


if __name__ == "__main__":
    main()
