"""Python functions from an environment's tool schemas, typed and documented the way trainers read tools.

TRL (and transformers' ``get_json_schema``) describe a tool to the model from a Python function: its name, its
type hints and its Google-style docstring. :func:`tool_function` builds such a function from one declared tool
(``{"type": "function", "name", "description", "parameters": <JSON Schema>}``), so the tool the model is shown
is the tool NeMo Gym's wire declares. Calling it hands its keyword arguments to a ``_call(name, arguments)`` method
of the object it is bound to.
"""

from __future__ import annotations

import inspect
import keyword
import logging
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("ngym.train")

_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
}
#: names a trainer's environment slot keeps for itself (TRL: ``reset``, ``get_reward``)
RESERVED = frozenset({"reset", "get_reward"})


def python_type(schema: Mapping[str, Any]) -> Any:
    """The Python type hint of a JSON Schema (``array`` of ``items``; the one non-null ``anyOf``; else ``str``)."""
    options = [o for o in schema.get("anyOf") or [] if isinstance(o, Mapping) and o.get("type") != "null"]
    if len(options) == 1:
        return python_type(options[0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "array":
        items = schema.get("items")
        return list[python_type(items)] if isinstance(items, Mapping) and items.get("type") else list  # type: ignore[misc]
    return _JSON_TYPES.get(kind, str) if isinstance(kind, str) else str


#: routes of NeMo Gym's wire and ngym's server that are the protocol, not tools
PROTOCOL_ROUTES = frozenset(
    {"seed_session", "verify", "close_session", "aggregate_metrics", "mcp", "health", "reverify_mode", "ors", "openenv"}
)


def openapi_tools(openapi: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool routes of a server's OpenAPI document (``GET /openapi.json``), as declared function tools.

    A tool is a ``POST /<name>`` that is not a protocol route; its parameters are its JSON body's properties
    (a ``$ref`` to the document's components resolved), its description the route's description or summary.
    """
    schemas: Mapping[str, Any] = (openapi.get("components") or {}).get("schemas") or {}

    def resolve(schema: Any) -> dict[str, Any]:
        ref = schema.get("$ref") if isinstance(schema, Mapping) else None
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            schema = schemas.get(ref.rsplit("/", 1)[1]) or {}
        return dict(schema) if isinstance(schema, Mapping) else {}

    tools: list[dict[str, Any]] = []
    for path, item in (openapi.get("paths") or {}).items():
        name = str(path).strip("/")
        operation = item.get("post") if isinstance(item, Mapping) else None
        if not isinstance(operation, Mapping) or "/" in name or not name or name in PROTOCOL_ROUTES:
            continue
        content = ((operation.get("requestBody") or {}).get("content") or {}).get("application/json") or {}
        body = resolve(content.get("schema") or {})
        properties = {k: resolve(v) for k, v in (body.get("properties") or {}).items()}
        parameters = {"type": "object", "properties": properties, "required": list(body.get("required") or [])}
        description = operation.get("description") or operation.get("summary") or ""
        tools.append({"type": "function", "name": name, "description": description, "parameters": parameters})
    return tools


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


def docstring(spec: Mapping[str, Any], names: list[str]) -> str:
    """A Google-style docstring: the tool's description, then one ``Args:`` line per parameter."""
    properties = (spec.get("parameters") or {}).get("properties") or {}
    lines = [_one_line(spec.get("description")) or f"The {spec['name']} tool."]
    if names:
        lines += ["", "Args:"]
        for name in names:
            prop = properties.get(name) or {}
            text = _one_line(prop.get("description")) or name.replace("_", " ")
            if isinstance(prop.get("enum"), list):
                text += f" (choices: {list(prop['enum'])})"
            lines.append(f"    {name}: {text}")
    return "\n".join(lines) + "\n"


def usable_name(name: str) -> bool:
    """Whether a tool can be a public method of a trainer's environment class."""
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_") and name not in RESERVED


def tool_function(spec: Mapping[str, Any]) -> Callable[..., str] | None:
    """A method ``name(self, *, <parameters>) -> str`` for one declared tool; None (logged) when it cannot be one."""
    name = str(spec.get("name", ""))
    if not usable_name(name):
        log.warning("tool %r cannot be a Python method (a keyword, private or reserved name): not offered", name)
        return None
    schema = spec.get("parameters") or {}
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    bad = [p for p in properties if not p.isidentifier() or keyword.iskeyword(p)]
    if bad:
        log.warning("tool %r has parameters that cannot be Python names (%s): not offered", name, ", ".join(bad))
        return None

    def tool(self: Any, **arguments: Any) -> str:
        # Optional parameters the model left out are not sent (the environment applies its own defaults).
        return str(self._call(name, {k: v for k, v in arguments.items() if v is not None or k in required}))

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    ordered = [p for p in properties if p in required] + [p for p in properties if p not in required]
    for pname in ordered:
        hint = python_type(properties[pname])
        if pname not in required:
            hint = hint | None
        annotations[pname] = hint
        default = inspect.Parameter.empty if pname in required else None
        parameters.append(
            inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hint)
        )
    annotations["return"] = str
    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = docstring(spec, ordered)
    tool.__annotations__ = annotations
    tool.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    return tool
