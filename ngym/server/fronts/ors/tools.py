"""An environment's tools as ORS tool specs: its tool routes with their bodies' JSON Schema, plus the final answer.

The tool routes are the ones MCP exposure serves (every ``POST /<name>`` that is not a protocol route, found by
``ngym.server.fronts.mcp.harvest_tools``). A session whose row declares its tools
(``responses_create_params.tools``, as NeMo Gym rows do) sees those, with the row's own descriptions and
parameter schemas: what the model would have been shown on NeMo Gym's wire, each called as NeMo Gym's agent calls
it, ``POST /<tool>``, even one no route names (a catch-all ``POST /{path}`` route runs it; or it answers 404, which
a verify that reads only the calls, as xlam_fc's, ignores). A protocol route (``verify``, ...) is never a tool.

Every environment also gets one **final-answer tool**, ``submit_answer(answer)``: the model calls it with its
final answer (for a math or judge environment: the answer ``/verify`` grades; for a tool environment: its closing
message). It ends the episode: the front builds the Responses trajectory, calls ``/verify``, and answers with the
reward and ``finished: true``. It is also advertised as ORS's terminal tool, so a harness that treats a plain
assistant message as the end of the rollout feeds that message to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from ngym.server.fronts.mcp import RESERVED_NAMES, harvest_tools

#: a name a tool route may have
_TOOL = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,127}")
SUBMIT_TOOL = "submit_answer"
SUBMIT_ARGUMENT = "answer"
_SUBMIT_DESCRIPTION = (
    "Submit your final answer and end the episode. Call it once, last, with the answer (or, after using the "
    "other tools, your closing message); the reward comes back with it."
)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]

    def as_wire(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def given(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments without a ``null`` for an optional parameter whose schema does not take null: TRL's
        ``OpenRewardSpec`` passes every parameter of its generated method, ``None`` for one the model left out (a
        parameter with no ``default`` in the schema, as an OpenEnv Action's ``metadata``), which the tool would
        refuse (422) though leaving it out is what was meant."""
        properties = self.input_schema.get("properties")
        if not isinstance(properties, dict) or None not in arguments.values():
            return arguments
        required = set(self.input_schema.get("required") or [])
        return {
            key: value
            for key, value in arguments.items()
            if value is not None or key in required or _takes_null(properties.get(key))
        }


def _takes_null(schema: Any) -> bool:
    """Whether a property's JSON Schema admits null (unknown properties are passed on as given)."""
    if not isinstance(schema, dict) or not schema:
        return True
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if kind is None and not any(key in schema for key in ("anyOf", "oneOf", "$ref", "enum", "const")):
        return True  # no type constraint at all
    alternatives = [*(schema.get("anyOf") or []), *(schema.get("oneOf") or [])]
    return any(_takes_null(option) for option in alternatives if isinstance(option, dict) and option)


class Toolbox:
    """The tool routes of one app (harvested once) and the final-answer tool's name."""

    def __init__(self, app: FastAPI, *, gymnasium: bool = False) -> None:
        #: a Gymnasium-style environment runs its tools inside ``/step``: its routes are not tools, its rows' are
        self.gymnasium = gymnasium
        harvested = {} if gymnasium else harvest_tools(app)
        self.routes = {
            tool.name: ToolSpec(tool.name, tool.description, tool.input_schema) for tool in harvested.values()
        }
        # A tool route already called submit_answer keeps its name; the final answer takes another.
        self.submit_name = SUBMIT_TOOL if SUBMIT_TOOL not in self.routes else f"ors_{SUBMIT_TOOL}"
        self.submit = ToolSpec(
            self.submit_name,
            _SUBMIT_DESCRIPTION,
            {
                "type": "object",
                "properties": {SUBMIT_ARGUMENT: {"type": "string", "description": "Your final answer."}},
                "required": [SUBMIT_ARGUMENT],
            },
        )

    def for_row(self, row: dict[str, Any] | None) -> dict[str, ToolSpec]:
        """The tools of a session seeded with ``row`` (all tool routes without a row), final answer last."""
        declared = _declared(row)
        if declared is None:
            tools = dict(self.routes)
        else:
            # What NeMo Gym's wire hands the model: every tool the row declares, called as its agent calls it
            # (``POST /<tool>``, whatever that answers: a catch-all route's tool, or a 404 a verify that only
            # reads the calls ignores); a protocol route never.
            tools = {name: spec for name, spec in declared.items() if name in self.routes or self._reachable(name)}
        tools[self.submit_name] = self.submit
        return tools

    def _reachable(self, name: str) -> bool:
        """Whether a declared tool may be called (a Gymnasium step runs any; a route must not be a protocol one)."""
        return self.gymnasium or (_TOOL.fullmatch(name) is not None and name not in RESERVED_NAMES)

    def listing(self, row: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ``ListToolsOutput``: the tools, and the final-answer tool as the terminal tool."""
        tools = self.for_row(row)
        return {
            "tools": [spec.as_wire() for spec in tools.values()],
            "terminal_tool": {"name": self.submit_name, "arg": SUBMIT_ARGUMENT, "description": self.submit.description},
            "supports_score_group": False,
            "message_block_types": ["text"],
        }


def _declared(row: dict[str, Any] | None) -> dict[str, ToolSpec] | None:
    """The function tools a row declares, or None when it declares none (then every route is offered)."""
    if not row:
        return None
    declared = (row.get("responses_create_params") or {}).get("tools")
    if not isinstance(declared, list) or not declared:
        return None
    tools: dict[str, ToolSpec] = {}
    for tool in declared:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            continue
        nested = tool.get("function")
        function: dict[str, Any] = nested if isinstance(nested, dict) else tool  # Chat's form or Responses'
        name = function.get("name")
        if isinstance(name, str) and name:
            schema = function.get("parameters")
            tools[name] = ToolSpec(
                name,
                str(function.get("description") or name.replace("_", " ")),
                schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
            )
    return tools
