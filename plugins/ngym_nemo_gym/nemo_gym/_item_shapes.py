"""How a Responses API item is recognised before it is validated: the SDK's item models by their ``type`` and a
message's kind by its fields (a dict as sent, or a model built in code)."""

from __future__ import annotations

import typing
from typing import Annotated, Any

from pydantic import BaseModel

STATUSES = frozenset({"in_progress", "completed", "incomplete"})
_OUTPUT_PARTS = frozenset({"output_text", "refusal"})


def sdk_models_by_type(union: Any) -> dict[str, type[BaseModel]]:
    """``type`` literal → SDK model class, for every member of an SDK item union (MCP calls, web search, ...)."""
    found: dict[str, type[BaseModel]] = {}
    for member in typing.get_args(typing.get_args(union)[0] if typing.get_origin(union) is Annotated else union):
        cls = typing.get_args(member)[0] if typing.get_origin(member) is Annotated else member
        type_field = getattr(cls, "model_fields", {}).get("type")
        if type_field is None:
            continue
        for literal in typing.get_args(type_field.annotation):
            if isinstance(literal, str):
                found.setdefault(literal, cls)
    return found


def field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _first_part_type(content: Any) -> Any:
    if not isinstance(content, list) or not content:
        return None
    first = content[0]
    return field(first, "type") or ("refusal" if field(first, "refusal") is not None else None)


def message_tag(value: Any) -> str:
    content, role = field(value, "content"), field(value, "role")
    if role in ("user", "system", "developer"):
        return "input_message" if isinstance(content, list) and field(value, "status") in STATUSES else "easy_message"
    if isinstance(content, list) and (
        _first_part_type(content) in _OUTPUT_PARTS or (not content and isinstance(field(value, "id"), str))
    ):
        return "output_message"
    return "easy_message"
