"""A Responses-format output, turned back into the chat messages verifiers' reward functions read.

verifiers scores a list of messages: an assistant message carrying text and/or ``tool_calls``, then one
``tool`` message per call (``tool_call_id``, ``content``). The Responses API spells the same turn as
items: ``message`` (role assistant, ``output_text`` parts), ``function_call`` (``call_id``, ``name``,
``arguments``) and ``function_call_output`` (``call_id``, ``output``). The rule:

- an assistant ``message`` item starts a new assistant message (its text parts joined);
- a ``function_call`` joins the assistant message being built when no tool result came after it, else
  starts a new one (so "text, then two calls" is one assistant message with text and two tool calls);
- a ``function_call_output`` is a ``tool`` message;
- ``reasoning`` items become the next assistant message's ``reasoning_content``;
- any other item (a user or system ``message`` the agent inserted) is kept with its role and text.
"""

from __future__ import annotations

from typing import Any


def output_text(content: Any) -> str:
    """The text of a message item's content (a string, or parts with ``text``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def chat_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages (verifiers' shape) of a Responses ``output`` list."""
    messages: list[dict[str, Any]] = []
    open_assistant: dict[str, Any] | None = None  # the assistant message tool calls still join
    reasoning: list[str] = []

    def new_assistant(content: str | None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            message["reasoning_content"] = "\n".join(reasoning)
            reasoning.clear()
        messages.append(message)
        return message

    for item in output:
        kind = item.get("type", "message")
        if kind == "reasoning":
            reasoning.extend(output_text(part.get("text", "")) for part in item.get("summary", []) or [])
        elif kind == "message" and item.get("role", "assistant") == "assistant":
            open_assistant = new_assistant(output_text(item.get("content")))
        elif kind == "function_call":
            if open_assistant is None:
                open_assistant = new_assistant(None)
            open_assistant.setdefault("tool_calls", []).append(
                {"id": str(item.get("call_id") or item.get("id")), "name": item["name"], "arguments": item["arguments"]}
            )
        elif kind == "function_call_output":
            output_value = item.get("output")
            text = output_value if isinstance(output_value, str) else output_text(output_value)
            messages.append({"role": "tool", "tool_call_id": str(item.get("call_id")), "content": text})
            open_assistant = None
        elif kind == "message":
            messages.append({"role": item.get("role", "user"), "content": output_text(item.get("content"))})
            open_assistant = None
    return messages
