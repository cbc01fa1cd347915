"""Responses API request → Chat Completions request, for environments and model servers that speak chat.

Items map as a chat model sees them: messages keep their role (``instructions`` and the leading system/developer
messages fold into one system message, as chat backends take one); consecutive assistant text, reasoning
(``<think>…</think>``) and ``function_call`` items become one assistant message with ``tool_calls``; a
``function_call_output`` becomes a ``tool`` message. A field or item with no chat equivalent raises
``NotImplementedError`` naming it, rather than being dropped.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from nemo_gym.openai_utils import NeMoGymChatCompletionCreateParamsNonStreaming, NeMoGymResponseCreateParamsNonStreaming

__all__ = ["ResponsesConverter"]

_NO_CHAT_EQUIVALENT = (
    "background",
    "context_management",
    "conversation",
    "include",
    "max_tool_calls",
    "previous_response_id",
    "prompt",
    "truncation",
)
_PASSED_THROUGH = (
    "model",
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "store",
    "temperature",
    "top_logprobs",
    "top_p",
    "user",
)


class _Assistant:
    """The assistant turn being assembled from consecutive output items."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.text: list[str] = []
        self.tool_calls: list[dict[str, Any]] = []
        self.open = False

    def flush(self, messages: list[dict[str, Any]]) -> None:
        if not self.open:
            return
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.tool_calls:  # never an empty list: OpenAI rejects `tool_calls: []`
            message["tool_calls"] = self.tool_calls
        messages.append(message)
        self._reset()


class ResponsesConverter(BaseModel):
    return_token_id_information: bool
    uses_reasoning_parser: bool = True

    def responses_to_chat_completion_create_params(
        self, responses_create_params: NeMoGymResponseCreateParamsNonStreaming
    ) -> NeMoGymChatCompletionCreateParamsNonStreaming:
        params = responses_create_params.model_dump(mode="json", exclude_none=True, exclude_unset=True)
        unsupported = sorted(set(_NO_CHAT_EQUIVALENT) & params.keys())
        if unsupported:
            raise NotImplementedError(
                f"Responses request field(s) {unsupported} have no Chat Completions representation"
            )
        items = params["input"]
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        messages = self._messages(items)
        instructions = params.get("instructions")
        if instructions:
            leading = [instructions]
            while messages and messages[0]["role"] in ("system", "developer"):
                leading.append(_text_of(messages.pop(0)["content"]))
            messages.insert(0, {"role": "system", "content": "\n\n".join(leading)})
        chat: dict[str, Any] = {key: params[key] for key in _PASSED_THROUGH if key in params}
        if "max_output_tokens" in params:
            chat["max_tokens"] = params["max_output_tokens"]
        if (params.get("reasoning") or {}).get("effort") is not None:
            chat["reasoning_effort"] = params["reasoning"]["effort"]
        chat.update(self._text_format(params.get("text")))
        tools = [self._tool(tool) for tool in params.get("tools") or []]
        if tools:
            chat["tools"] = tools
            if "tool_choice" in params:
                chat["tool_choice"] = self._tool_choice(params["tool_choice"])
        else:
            chat.pop("parallel_tool_calls", None)
        return NeMoGymChatCompletionCreateParamsNonStreaming(messages=messages, **chat)

    def _messages(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        assistant = _Assistant()
        for item in items:
            kind = item.get("type") or ("message" if "role" in item else None)
            if kind == "message" and item["role"] == "assistant":
                assistant.open = True
                assistant.text.append(_text_of(item.get("content")))
            elif kind == "reasoning":
                assistant.open = True
                texts = [part.get("text", "") for part in item.get("summary") or []]
                assistant.text.append("".join(f"<think>{text}</think>" for text in texts if text))
            elif kind == "function_call":
                assistant.open = True
                function = {"name": item["name"], "arguments": item["arguments"]}
                assistant.tool_calls.append({"id": item["call_id"], "type": "function", "function": function})
            elif kind == "function_call_output":
                assistant.flush(messages)
                messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": _tool_output(item)})
            elif kind == "message":
                assistant.flush(messages)
                messages.append({"role": item["role"], "content": _chat_content(item.get("content"))})
            else:
                raise NotImplementedError(f"{kind!r} items have no Chat Completions representation")
        assistant.flush(messages)
        return messages

    @staticmethod
    def _tool(tool: dict[str, Any]) -> dict[str, Any]:
        if tool.get("type") != "function":
            raise NotImplementedError(f"Responses tool type {tool.get('type')!r} has no Chat Completions conversion")
        function = {
            key: tool[key] for key in ("name", "description", "parameters", "strict") if tool.get(key) is not None
        }
        return {"type": "function", "function": function}

    @staticmethod
    def _tool_choice(choice: Any) -> Any:
        if isinstance(choice, dict) and choice.get("type") == "function":
            return {"type": "function", "function": {"name": choice["name"]}}
        return choice

    @staticmethod
    def _text_format(text: dict[str, Any] | None) -> dict[str, Any]:
        chat: dict[str, Any] = {}
        text_format = (text or {}).get("format") or {}
        if text_format.get("type") == "json_schema":
            schema = {
                key: text_format[key] for key in ("name", "schema", "strict", "description") if key in text_format
            }
            chat["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif text_format.get("type") == "json_object":
            chat["response_format"] = {"type": "json_object"}
        elif text_format.get("type") not in (None, "text"):
            raise NotImplementedError(f"Unsupported Responses text format type {text_format.get('type')!r}")
        if text is not None and text.get("verbosity") is not None:
            chat["verbosity"] = text["verbosity"]
        return chat


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text") or part.get("refusal") or "" for part in content)


def _chat_content(content: Any) -> Any:
    """Input parts → chat parts (text, image URLs); a string stays a string."""
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        kind = part.get("type")
        if kind in ("input_text", "output_text"):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image" and part.get("image_url"):
            url = part["image_url"]["url"] if isinstance(part["image_url"], dict) else part["image_url"]
            parts.append({"type": "image_url", "image_url": {"url": url, "detail": part.get("detail", "auto")}})
        else:
            raise NotImplementedError(f"Unsupported part param type: {kind}")
    return parts


def _tool_output(item: dict[str, Any]) -> Any:
    output = item["output"]
    if isinstance(output, str):
        return output
    if any(part.get("type") != "input_text" for part in output):
        raise NotImplementedError(f"tool output of call {item['call_id']!r} holds parts a chat tool message cannot")
    return [{"type": "text", "text": part["text"]} for part in output]


#: Item types only a model produces: the first one (or the first assistant message) in a list of items starts
#: what the model generated; what precedes it is input (user, system and developer messages, tool results).
MODEL_OUTPUT_ITEM_TYPES = frozenset(
    {
        "code_interpreter_call",
        "computer_call",
        "custom_tool_call",
        "file_search_call",
        "function_call",
        "image_generation_call",
        "local_shell_call",
        "mcp_approval_request",
        "mcp_call",
        "mcp_list_tools",
        "reasoning",
        "web_search_call",
        "apply_patch_call",
        "shell_call",
        "tool_search_call",
    }
)


def split_responses_input_output_items(items: list[Any]) -> tuple[list[Any], list[Any]]:
    """Split ``items`` where the model's own output begins: at the first assistant message or model-only item
    (``MODEL_OUTPUT_ITEM_TYPES``). Items are objects with ``type``/``role`` attributes (NeMo's item types)."""
    for index, item in enumerate(items):
        kind = getattr(item, "type", None)
        if (kind == "message" and getattr(item, "role", None) == "assistant") or kind in MODEL_OUTPUT_ITEM_TYPES:
            return items[:index], items[index:]
    return list(items), []
