"""Run by an OpenEnv environment's own interpreter (``python own_client.py JSON``): OpenEnv's side of a side-by-side.

Imports nothing of ngym. The request is the JSON argument, or standard input when the argument is ``-``.
OpenEnv's own client code drives OpenEnv's own server, or reads answers ngym gave:

- the client is the environment's own ``EnvClient`` subclass (found in its package's ``client`` module, else its
  package), else, when the environment has none or it cannot be imported, OpenEnv's ``GenericEnvClient`` (MCP
  environments: ``MCPToolClient``); which one is said in the answer, with why the own one was not used;
- ``{"mode": "drive", "url", "seed", "steps": [...]}``: ``reset(seed=...)`` then ``step`` for each action (a
  dict, made into the client's Action type; for MCP environments ``{"tool_name", "arguments"}`` as a
  ``CallToolAction``);
- ``{"mode": "parse", "answers": [...]}``: the same client parses ``{"observation", "reward", "done"}`` answers;
- ``"generic": REASON`` uses OpenEnv's generic client even when the environment has its own (its own failed).

Prints ``OWN-CLIENT <json>``: ``{"client": "module:Class", "fallback": reason or null, "records": [...]}``, one
record per reset/step, ``{"observation", "reward", "done"}`` as the client parsed them (the observation without
``reward``/``done``/``metadata``, which OpenEnv's server keeps outside it), and when driving, ``wire_reward``: the
reward as the server sent it (what an episode's reward rule reads; a client may parse another one).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
import typing
from typing import Any


def _own_client(package: str | None, mcp: bool, generic: str | None) -> tuple[Any, str | None]:
    """The environment's own EnvClient subclass, else (or when ``generic`` says why not) OpenEnv's generic one."""
    from openenv.core.env_client import EnvClient

    why = generic or "the environment names no package"
    if package and not generic:
        for module_name in (f"{package}.client", package):
            try:
                module = importlib.import_module(module_name)
            except Exception as exc:  # noqa: BLE001 - any import failure of the environment's code is reported
                why = f"importing {module_name} failed: {type(exc).__name__}: {exc}"
                continue
            found = [
                c
                for c in vars(module).values()
                if inspect.isclass(c)
                and issubclass(c, EnvClient)
                and c.__module__.startswith(package)
                and not inspect.isabstract(c)
            ]
            if found:
                return found[0], None
            why = f"{module_name} defines no EnvClient subclass"
    if mcp:
        from openenv.core.mcp_client import MCPToolClient

        return MCPToolClient, why
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient, why


def _action_type(client_cls: Any) -> Any:
    """The Action type the client's generic parameters name (``EnvClient[Action, Obs, State]``), else None."""
    for klass in client_cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            args = typing.get_args(base)
            if args and inspect.isclass(args[0]) and args[0] is not dict:
                return args[0]
    return None


def _action(client_cls: Any, step: dict[str, Any], mcp: bool) -> Any:
    if mcp:
        from openenv.core.env_server.mcp_types import CallToolAction

        return CallToolAction(tool_name=step["tool_name"], arguments=step.get("arguments") or {})
    action_cls = _action_type(client_cls)
    if action_cls is None or not hasattr(action_cls, "model_validate"):
        return dict(step)
    return action_cls.model_validate(step)


def _record(result: Any) -> dict[str, Any]:
    observation = result.observation
    if hasattr(observation, "model_dump"):
        observation = observation.model_dump(exclude={"reward", "done", "metadata"})
    elif isinstance(observation, dict):
        observation = {k: v for k, v in observation.items() if k not in ("reward", "done", "metadata")}
    return {"observation": observation, "reward": result.reward, "done": bool(result.done)}


async def _drive(client_cls: Any, request: dict[str, Any], mcp: bool) -> list[dict[str, Any]]:
    client = client_cls(base_url=request["url"])
    wire: list[Any] = []  # the reward as OpenEnv's server sent it (a client may read another one)
    parse = client._parse_result

    def keep_wire_reward(payload: dict[str, Any]) -> Any:
        wire.append(payload.get("reward"))
        return parse(payload)

    client._parse_result = keep_wire_reward
    await client.connect()
    try:
        records = [_record(await client.reset(seed=request.get("seed")))]
        for step in request["steps"]:
            records.append(_record(await client.step(_action(client_cls, step, mcp))))
        for record, reward in zip(records, wire, strict=False):
            record["wire_reward"] = reward
        return records
    finally:
        await client.close()


def main() -> None:
    request = json.loads(sys.stdin.read() if sys.argv[1:] == ["-"] else sys.argv[1])  # "-": a large request
    sys.path[:0] = request.get("path", [])
    mcp = bool(request.get("mcp"))
    client_cls, fallback = _own_client(request.get("package"), mcp, request.get("generic"))
    out: dict[str, Any] = {"client": f"{client_cls.__module__}:{client_cls.__qualname__}", "fallback": fallback}
    try:
        if request["mode"] == "parse":
            client = client_cls.__new__(client_cls)  # parsing needs no connection
            out["records"] = [_record(client._parse_result(answer)) for answer in request["answers"]]
        else:
            out["records"] = asyncio.run(_drive(client_cls, request, mcp))
    except Exception as exc:  # noqa: BLE001 - the environment's own client failing is a finding, said in one line
        out["error"] = f"{type(exc).__name__}: {exc}"
    print("OWN-CLIENT " + json.dumps(out, default=str))


if __name__ == "__main__":
    main()
