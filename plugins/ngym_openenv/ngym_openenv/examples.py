"""Example data for an installed OpenEnv environment, made at install from what the environment declares.

OpenEnv environments ship no dataset rows and no recorded rollouts, yet ``ngym validate``, ``profile``,
``rollout --model replay`` and ``containerize --run`` all start from ``data/example.jsonl`` and
``data/example_rollouts.jsonl``. ``ngym install`` writes both into the generated distribution:

- the **row**: the prompt is the environment's ``reset`` observation (with its name and description), the
  tools are its MCP tools or ``step`` with its Action's JSON schema, and ``seed: 0`` goes to ``reset``;
- the **recorded rollout**: one action made from the schema (``example_action``: each required field's
  ``default``, ``examples`` or first ``enum`` value, else a placeholder of its type), stepped once on a real
  episode at install; the ``response`` records the call and OpenEnv's answer, and ``reward`` is the episode's
  reward under the environment's rule — recorded only when a second episode with the same row and action got
  the same reward (an environment whose ``reset`` ignores the seed and draws a random task would otherwise
  make ``ngym validate`` fail on a reward that was never promised).

A user with better examples passes them at install (``-o examples=FILE.jsonl``, lines of row + ``response`` +
``reward``) and they are used instead.
"""

from __future__ import annotations

import json
from typing import Any

from ngym_openenv.manifest import Manifest

#: The seed every generated row passes to ``reset`` (OpenEnv passes it on when ``reset`` takes one).
EXAMPLE_SEED = 0
_PLACEHOLDERS: dict[str, Any] = {"string": "example", "integer": 0, "number": 0.0, "boolean": False}


def example_action(schema: dict[str, Any], defs: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """A value ``schema`` accepts, made from what it declares; an object gets its required properties only."""
    defs = {**(defs or {}), **schema.get("$defs", {}), **schema.get("definitions", {})}
    if "$ref" in schema and depth < 8:
        target = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {})
        return example_action({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs, depth + 1)
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    if schema.get("examples"):
        return schema["examples"][0]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        choices = [c for c in schema.get(key) or [] if c.get("type") != "null"]
        if choices and depth < 8:
            return example_action(choices[0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties") or {}
        return {
            name: example_action(properties.get(name) or {}, defs, depth + 1) for name in schema.get("required") or []
        }
    if kind == "array":
        return []
    if kind in ("integer", "number") and "minimum" in schema:
        return schema["minimum"]
    return _PLACEHOLDERS.get(str(kind), "example")


def tool_name_and_schema(manifest: Manifest) -> tuple[str, dict[str, Any], str]:
    """The tool the example calls: the first MCP tool, else ``step``; its parameters' schema and description."""
    if manifest.tool_mode == "mcp" and manifest.tools:
        tool = manifest.tools[0]
        return tool.name, tool.input_schema, tool.description
    return "step", manifest.action_schema, "One step of the environment: the arguments are its Action."


def tools_of(manifest: Manifest) -> list[dict[str, Any]]:
    """The row's tools in the Responses format: every MCP tool, else ``step`` with the Action's schema."""
    if manifest.tool_mode == "mcp":
        named = [(t.name, t.input_schema, t.description) for t in manifest.tools]
    else:
        named = [tool_name_and_schema(manifest)]
    return [
        {"type": "function", "name": name, "description": description, "parameters": schema, "strict": False}
        for name, schema, description in named
    ]


def prompt_of(manifest: Manifest, observation: dict[str, Any]) -> str:
    """The user's message: the environment's name and description and its first (``reset``) observation."""
    about = f": {manifest.description.strip()}" if manifest.description.strip() else ""
    shown = json.dumps(observation, sort_keys=True, default=str)
    return (
        f"You are acting in the OpenEnv environment {manifest.name}{about}\n"
        f"Its first observation (after reset):\n{shown}\n"
        "Act by calling the tools; each call answers with the next observation, its reward and whether the "
        "episode is done."
    )


def example_row(manifest: Manifest, observation: dict[str, Any]) -> dict[str, Any]:
    """A dataset row for the environment: the prompt, its tools, and the seed for ``reset``."""
    return {
        "responses_create_params": {
            "input": [{"role": "user", "content": prompt_of(manifest, observation)}],
            "tools": tools_of(manifest),
        },
        "seed": EXAMPLE_SEED,
    }


def recorded_rollout(
    row: dict[str, Any], tool: str, arguments: dict[str, Any], answer: dict[str, Any], reward: float | None
) -> dict[str, Any]:
    """The row plus a Responses-format ``response`` that made one call and got ``answer``, and its ``reward``."""
    output = [
        {
            "type": "function_call",
            "name": tool,
            "arguments": json.dumps(arguments),
            "call_id": "call_0",
            "id": "fc_0",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_0", "output": json.dumps(answer, default=str)},
        {
            "type": "message",
            "id": "msg_0",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
        },
    ]
    response = {
        "id": "resp_openenv_example",
        "created_at": 0.0,
        "model": "ngym-openenv-install",
        "object": "response",
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": row["responses_create_params"]["tools"],
        "status": "completed",
    }
    line: dict[str, Any] = {**row, "response": response}
    if reward is not None:
        line["reward"] = reward
    return line
