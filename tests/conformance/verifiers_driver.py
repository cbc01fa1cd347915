"""Run a verifiers environment with verifiers itself against a scripted model; print what it scored.

Runs in the environment's own virtualenv (verifiers installed, ngym not):
``python verifiers_driver.py legacy MODULE BASE_URL N`` runs ``load_environment().evaluate(...)`` (<= 0.3);
``python verifiers_driver.py v1 TRACES_JSONL`` reads the traces ``vf-eval`` wrote (0.4). Either prints one
JSON list, a row per rollout: its prompt text, tool outputs, each reward function's score, and the reward.
"""

import asyncio
import importlib
import json
import sys


def text(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else getattr(p, "text", "") for p in content)
    return "" if content is None else str(content)


def dump(message):
    return message.model_dump() if hasattr(message, "model_dump") else dict(message)


def legacy(module, base_url, n):
    import verifiers as vf

    env = importlib.import_module(module).load_environment()
    client = vf.ClientConfig(api_base_url=base_url, api_key_var="NGYM_SCRIPTED_KEY", max_retries=0)
    results = asyncio.run(
        env.evaluate(
            client=client, model="scripted", num_examples=n, rollouts_per_example=1, max_concurrent=1, on_progress=[]
        )
    )
    rows = []
    for output in results["outputs"]:
        prompt = " ".join(text(dump(m).get("content")) for m in output["prompt"] or [])
        completion = [dump(m) for m in output["completion"] or []]
        rows.append(
            {
                "prompt": prompt,
                "tool_outputs": [text(m.get("content")) for m in completion if m.get("role") == "tool"],
                "rewards": {k: float(v) for k, v in output["metrics"].items()},
                "reward": float(output["reward"]),
                "error": str(output.get("error")) if output.get("error") else None,
            }
        )
    return rows


def v1(traces_path):
    rows = []
    with open(traces_path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            for trace in json.loads(line).get("traces", []):
                rows.append(v1_row(trace))
    return rows


def v1_row(trace):
    messages = [node["message"] for node in trace.get("nodes", [])]
    rewards = {k: (None if v is None else v["score"]) for k, v in trace.get("rewards", {}).items()}
    weights = {k: (None if v is None else v.get("weight", 1.0)) for k, v in trace.get("rewards", {}).items()}
    tools = {t["name"]: t.get("parameters") for t in trace.get("tools", [])}
    return {
        "prompt": " ".join(text(m.get("content")) for m in messages if m.get("role") in ("user", "system")),
        "tool_outputs": [text(m.get("content")) for m in messages if m.get("role") == "tool"],
        "rewards": rewards,
        "weights": weights,
        "reward": sum(s * weights[k] for k, s in rewards.items() if s is not None),
        "tools": tools,
        "errors": trace.get("errors", []),
    }


if __name__ == "__main__":
    if sys.argv[1] == "legacy":
        print(json.dumps(legacy(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        print(json.dumps(v1(sys.argv[2])))
