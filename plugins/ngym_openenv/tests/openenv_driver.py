"""Run in an OpenEnv environment's own interpreter by the fidelity tests: OpenEnv's side of the comparison.

``python openenv_driver.py JSON`` with ``{"client": "module:Class", "action": "module:Class", "path": [...],
"mode": ...}``:

- ``"mode": "drive"`` (with ``url``, ``reset``, ``steps``): OpenEnv's own client of the environment drives its own
  server: ``reset(**reset)``, then ``step(Action(**s))`` for each step;
- ``"mode": "parse"`` (with ``answers``): the same client parses answers that ngym gave (``_parse_result``), so both
  sides are read by the same code.

Prints ``DRIVER <json list>``: one record per reset/step, ``{"observation": ..., "reward": ..., "done": ...}``,
the observation being the client's parsed Observation without reward/done/metadata (which OpenEnv's server
keeps out of the observation).
"""

import asyncio
import importlib
import json
import sys


def load(target):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def record(result):
    observation = result.observation.model_dump(exclude={"reward", "done", "metadata"})
    return {"observation": observation, "reward": result.reward, "done": bool(result.done)}


async def drive(client_cls, action_cls, request):
    client = client_cls(base_url=request["url"])
    await client.connect()
    try:
        records = [record(await client.reset(**request.get("reset", {})))]
        for step in request["steps"]:
            records.append(record(await client.step(action_cls(**step))))
        state = await client.state()
        return {"records": records, "state": state.model_dump() if hasattr(state, "model_dump") else dict(state)}
    finally:
        await client.close()


def main():
    request = json.loads(sys.argv[1])
    sys.path[:0] = request.get("path", [])
    client_cls = load(request["client"])
    if request["mode"] == "parse":
        client = client_cls.__new__(client_cls)  # parsing needs no connection
        out = {"records": [record(client._parse_result(answer)) for answer in request["answers"]]}
    else:
        out = asyncio.run(drive(client_cls, load(request["action"]), request))
    print("DRIVER " + json.dumps(out, default=str))


if __name__ == "__main__":
    main()
