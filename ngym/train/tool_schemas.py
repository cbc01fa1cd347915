"""An environment's tools as OpenAI function schemas, read from its tool routes, and verl's tool config from them.

A tool of an ngym environment is a ``POST /<name>`` route beside the protocol's own routes; its body's JSON Schema
is in the server's OpenAPI document (``GET /openapi.json`` of a running server, ``app.openapi()`` of one built in
process). :func:`tools_from_openapi` turns each into ``{"type": "function", "function": {name, description,
parameters}}``, the shape verl (and every OpenAI-style trainer) reads; where the dataset rows declare the same tool
(``responses_create_params.tools``, what NeMo Gym's wire shows the model), their description and parameter
descriptions win, so the model is shown the tool the environment's data was written for.

:func:`verl_tool_config` is verl's tool config (``actor_rollout_ref.rollout.multi_turn.tool_config_path``): one
entry per tool, each an :class:`ngym.train.verl.NgymTool` pointed at the server's URL.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: POST routes that are the protocol, not tools (a model must never be offered /verify)
PROTOCOL_ROUTES = frozenset(
    {"seed_session", "verify", "close_session", "aggregate_metrics", "mcp", "reset", "step", "close", "run"}
)
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]+")
#: the class verl instantiates for each tool (``class_name`` in the config)
TOOL_CLASS = "ngym.train.verl.NgymTool"


def _resolve(node: Any, components: Mapping[str, Any], depth: int = 0) -> Any:
    """``node`` with every local ``$ref`` (``#/components/schemas/X`` or ``#/$defs/X``) inlined (depth-bounded)."""
    if depth > 20:
        return {}
    if isinstance(node, list):
        return [_resolve(item, components, depth + 1) for item in node]
    if not isinstance(node, Mapping):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = components.get(ref.rsplit("/", 1)[-1], {})
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _resolve(merged, components, depth + 1)
    return {k: _resolve(v, components, depth + 1) for k, v in node.items() if k not in ("$defs", "title")}


def _typed(prop: Mapping[str, Any]) -> dict[str, Any]:
    """A property with a ``type`` (an ``anyOf`` of plain types becomes a list of types, as verl's schema reads it)."""
    out = dict(prop)
    if "type" not in out:
        options = out.pop("anyOf", None) or out.pop("oneOf", None)
        kinds: list[str] = []
        for option in options or []:
            kind = option.get("type") if isinstance(option, Mapping) else None
            if isinstance(kind, str) and kind not in kinds:
                kinds.append(kind)
            elif isinstance(option, Mapping) and "enum" in option and "enum" not in out:
                out["enum"] = option["enum"]
                kinds.append("string")
        if "enum" in out and not kinds:
            kinds = ["string"]
        out["type"] = kinds[0] if len(kinds) == 1 else (kinds or "string")
    if "default" in out and out["default"] is None:
        del out["default"]
    return out


def parameters_schema(body: Mapping[str, Any] | None) -> dict[str, Any]:
    """A tool's ``parameters``: an object schema whose every property has a ``type``."""
    body = dict(body or {})
    properties = {name: _typed(prop) for name, prop in (body.get("properties") or {}).items()}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    required = [name for name in body.get("required") or [] if name in properties]
    schema["required"] = required
    return schema


def tools_from_openapi(openapi: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every tool route of a server's OpenAPI document, as an OpenAI function schema, in the document's order."""
    components = (openapi.get("components") or {}).get("schemas") or {}
    tools: list[dict[str, Any]] = []
    for path, operations in (openapi.get("paths") or {}).items():
        post = operations.get("post") if isinstance(operations, Mapping) else None
        name = str(path).lstrip("/")
        if not isinstance(post, Mapping) or name in PROTOCOL_ROUTES or not _TOOL_NAME.fullmatch(name):
            continue
        content = ((post.get("requestBody") or {}).get("content") or {}).get("application/json") or {}
        body = _resolve(content.get("schema") or {}, components)
        description = str(post.get("description") or post.get("summary") or name.replace("_", " "))
        function = {"name": name, "description": description.strip(), "parameters": parameters_schema(body)}
        tools.append({"type": "function", "function": function})
    return tools


def declared_tools(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The function tools dataset rows declare (``responses_create_params.tools``), first declaration of each."""
    seen: dict[str, dict[str, Any]] = {}
    for row in rows:
        params = row.get("responses_create_params") or {}
        for tool in params.get("tools") or [] if isinstance(params, Mapping) else []:
            if isinstance(tool, Mapping) and tool.get("type") == "function" and isinstance(tool.get("name"), str):
                seen.setdefault(tool["name"], dict(tool))
    return seen


def with_declarations(tools: list[dict[str, Any]], declared: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` with the rows' descriptions (of the tool and of each parameter) where the rows declare them."""
    out = []
    for tool in tools:
        tool = copy.deepcopy(tool)
        function = tool["function"]
        spec = declared.get(function["name"])
        if spec is not None:
            if spec.get("description"):
                function["description"] = str(spec["description"])
            declared_props = (spec.get("parameters") or {}).get("properties") or {}
            for pname, prop in function["parameters"]["properties"].items():
                text = (declared_props.get(pname) or {}).get("description")
                if text:
                    prop["description"] = str(text)
        out.append(tool)
    return out


def verl_tool_config(url: str, tools: list[dict[str, Any]], *, timeout: float | None = None) -> dict[str, Any]:
    """verl's tool config: one ``NgymTool`` per tool, each calling the environment at ``url``."""
    config: dict[str, Any] = {"type": "native", "url": url.rstrip("/")}
    if timeout is not None:
        config["timeout"] = timeout
    return {"tools": [{"class_name": TOOL_CLASS, "config": dict(config), "tool_schema": tool} for tool in tools]}
