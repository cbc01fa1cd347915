"""NeMo Gym's OpenAI types: Responses and Chat Completions objects with the OpenAI SDK's attribute access.

Environments written for NeMo Gym read ``body.response.output[i].content[0].text``,
``response.incomplete_details.reason``, ``item.summary[0].text`` and ``response.tools[0].name``: the objects must be
the OpenAI SDK's pydantic models, not dicts. Every item model here subclasses the SDK's own class, so
``isinstance(item, openai.types.responses.ResponseOutputMessage)`` holds too; the SDK's models keep unknown fields.

``NeMoGymResponseCreateParamsNonStreaming`` is strict (an unknown key is a validation error), as NeMo Gym's is.
Items are told apart by :func:`_item_tag`: by ``type``, and for messages by role and content (a user or system
message may appear inside a response's ``output``, as local agents put the prompt there).

A body read straight from JSON (ngym's direct road: ``model_validate_json``) reaches the SDK's tool unions as
Python objects (:data:`_FROM_PYTHON`): read from JSON, pydantic-core builds each tool's ``Dict[str, object]`` (its
JSON schema) again for every member of the union it tries, 5-15 times the work of reading the body once.

The Chat Completions types and the minimal client are defined in ``nemo_gym._openai_chat`` and named here, where
NeMo Gym's code imports them.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from openai.types.responses import (
    EasyInputMessage,
    Response,
    ResponseFunctionToolCall,
    ResponseFunctionToolCallOutputItem,
    ResponseInputItem,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
    ResponseReasoningItem,
    ToolParam,
)
from openai.types.responses.response_create_params import ToolChoice
from openai.types.responses.response_input_content_param import ResponseInputContentParam
from openai.types.responses.response_input_item import FunctionCallOutput, Message
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import ResponseUsage
from openai.types.responses.tool import Tool
from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, model_validator

from nemo_gym._openai_chat import (
    RATE_LIMIT_ERROR_CODES,
    RETRY_ERROR_CODES,
    NeMoGymAsyncOpenAI,
    NeMoGymChatCompletion,
    NeMoGymChatCompletionCreateParamsNonStreaming,
    NeMoGymChatCompletionMessage,
    NeMoGymChatCompletionMessageToolCall,
    NeMoGymChoice,
)
from nemo_gym.server_utils import MAX_NUM_TRIES, get_response_json, raise_for_status
from ngym.plugin_api import ResponseCreateParams

__all__ = [
    "MAX_NUM_TRIES",
    "accumulate_response_usage",
    "RATE_LIMIT_ERROR_CODES",
    "RETRY_ERROR_CODES",
    "NeMoGymAsyncOpenAI",
    "NeMoGymChatCompletion",
    "NeMoGymChatCompletionCreateParamsNonStreaming",
    "NeMoGymChatCompletionMessage",
    "NeMoGymChatCompletionMessageToolCall",
    "NeMoGymChoice",
    "NeMoGymEasyInputMessage",
    "NeMoGymFunctionCallOutput",
    "NeMoGymMessage",
    "NeMoGymResponse",
    "NeMoGymResponseCreateParamsNonStreaming",
    "NeMoGymResponseFunctionCallOutput",
    "NeMoGymResponseFunctionToolCall",
    "NeMoGymResponseInputItem",
    "NeMoGymResponseOutputItem",
    "NeMoGymResponseOutputMessage",
    "NeMoGymResponseOutputRefusal",
    "NeMoGymResponseOutputText",
    "NeMoGymResponseReasoningItem",
    "NeMoGymResponseUsage",
    "NeMoGymSummary",
    "get_response_json",
    "raise_for_status",
]


_STATUSES = frozenset({"in_progress", "completed", "incomplete"})
_OUTPUT_PARTS = frozenset({"output_text", "refusal"})
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


class TokenIDLogProbMixin(BaseModel):
    """Token ids and log-probs a training-time model server attaches to what it generated."""

    prompt_token_ids: list[int]
    generation_token_ids: list[int]
    generation_log_probs: list[float]
    #: Mixture-of-experts routing a model server may report with the tokens (kept as sent).
    routed_experts: Any = None


# ---- items ------------------------------------------------------------------------------------------


class NeMoGymSummary(Summary):
    pass


class NeMoGymResponseOutputText(ResponseOutputText):
    type: Literal["output_text"] = "output_text"
    annotations: list[Any] = Field(default_factory=list)


class NeMoGymResponseOutputRefusal(ResponseOutputRefusal):
    type: Literal["refusal"] = "refusal"


NeMoGymContent: TypeAlias = Annotated[
    NeMoGymResponseOutputText | NeMoGymResponseOutputRefusal, Field(discriminator="type")
]


class NeMoGymResponseOutputMessage(ResponseOutputMessage):
    """An assistant message the model wrote (``output_text`` / ``refusal`` parts)."""

    content: list[NeMoGymContent]  # type: ignore[assignment]  # NeMo Gym's subclasses of the SDK's part models
    role: Literal["assistant"] = "assistant"
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    type: Literal["message"] = "message"


class NeMoGymResponseFunctionToolCall(ResponseFunctionToolCall):
    type: Literal["function_call"] = "function_call"


class NeMoGymResponseReasoningItem(ResponseReasoningItem):
    summary: list[NeMoGymSummary]  # type: ignore[assignment]  # NeMo Gym's subclass of the SDK's Summary
    type: Literal["reasoning"] = "reasoning"


# Input content parts stay the SDK's TypedDicts (plain dicts), as NeMo Gym has them: ``part["type"]``.
NeMoGymResponseInputContentList: TypeAlias = list[ResponseInputContentParam]


class NeMoGymEasyInputMessage(EasyInputMessage):
    """A message as written in a prompt: ``content`` a string or input parts; any role."""

    content: str | NeMoGymResponseInputContentList  # type: ignore[assignment]  # plain-dict parts (see above)
    type: Literal["message"] = "message"


class NeMoGymMessage(Message):
    """An input message with a list of parts and a status (user, system or developer)."""

    content: NeMoGymResponseInputContentList  # type: ignore[assignment]  # plain-dict parts (see above)
    status: Literal["in_progress", "completed", "incomplete"] = "completed"
    type: Literal["message"] = "message"


class NeMoGymFunctionCallOutput(FunctionCallOutput):
    """A tool result as an agent feeds it back (no id or status needed)."""

    type: Literal["function_call_output"] = "function_call_output"


class NeMoGymResponseFunctionCallOutput(ResponseFunctionToolCallOutputItem):
    """A tool result as a provider reports it in a response (with id and status)."""


class NeMoGymEasyInputMessageForTraining(NeMoGymEasyInputMessage, TokenIDLogProbMixin):
    pass


class NeMoGymMessageForTraining(NeMoGymMessage, TokenIDLogProbMixin):
    pass


class NeMoGymResponseOutputMessageForTraining(NeMoGymResponseOutputMessage, TokenIDLogProbMixin):
    pass


class NeMoGymResponseFunctionToolCallForTraining(NeMoGymResponseFunctionToolCall, TokenIDLogProbMixin):
    pass


class NeMoGymResponseReasoningItemForTraining(NeMoGymResponseReasoningItem, TokenIDLogProbMixin):
    pass


class NeMoGymOtherItem(BaseModel):
    """An item of a type neither NeMo Gym nor the SDK installed here knows: kept as sent."""

    model_config = ConfigDict(extra="allow")

    type: str | None = None


_TRAINING = {
    "easy_message": NeMoGymEasyInputMessageForTraining,
    "input_message": NeMoGymMessageForTraining,
    "output_message": NeMoGymResponseOutputMessageForTraining,
    "function_call": NeMoGymResponseFunctionToolCallForTraining,
    "reasoning": NeMoGymResponseReasoningItemForTraining,
}
_OWN = {
    "easy_message": NeMoGymEasyInputMessage,
    "input_message": NeMoGymMessage,
    "output_message": NeMoGymResponseOutputMessage,
    "function_call": NeMoGymResponseFunctionToolCall,
    "function_call_output_input": NeMoGymFunctionCallOutput,
    "reasoning": NeMoGymResponseReasoningItem,
}

_TAG_OF_CLASS: dict[type, str] = {cls: tag for tag, cls in _OWN.items()}
_TAG_OF_CLASS.update({cls: f"{tag}:training" for tag, cls in _TRAINING.items()})
_TAG_OF_CLASS[NeMoGymResponseFunctionCallOutput] = "sdk:function_call_output"
_TAG_OF_CLASS[NeMoGymOtherItem] = "other"


def _sdk_models_by_type(union: Any) -> dict[str, type[BaseModel]]:
    """``type`` literal → SDK model class, for every member of an SDK item union (MCP calls, web search, ...)."""
    found: dict[str, type[BaseModel]] = {}
    for member in typing.get_args(typing.get_args(union)[0] if typing.get_origin(union) is Annotated else union):
        cls = typing.get_args(member)[0] if typing.get_origin(member) is Annotated else member
        field = getattr(cls, "model_fields", {}).get("type")
        if field is None:
            continue
        for literal in typing.get_args(field.annotation):
            if isinstance(literal, str):
                found.setdefault(literal, cls)
    return found


_SDK_OUTPUT = {k: v for k, v in _sdk_models_by_type(ResponseOutputItem).items() if k not in {"message", "reasoning"}}
_SDK_INPUT = {k: v for k, v in _sdk_models_by_type(ResponseInputItem).items() if k not in {"message", "reasoning"}}


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _first_part_type(content: Any) -> Any:
    if not isinstance(content, list) or not content:
        return None
    first = content[0]
    return _field(first, "type") or ("refusal" if _field(first, "refusal") is not None else None)


def _message_tag(value: Any) -> str:
    content, role = _field(value, "content"), _field(value, "role")
    if role in ("user", "system", "developer"):
        return "input_message" if isinstance(content, list) and _field(value, "status") in _STATUSES else "easy_message"
    if isinstance(content, list) and (
        _first_part_type(content) in _OUTPUT_PARTS or (not content and isinstance(_field(value, "id"), str))
    ):
        return "output_message"
    return "easy_message"


def _item_tag(value: Any, *, output: bool) -> str:
    """Which model an item validates as: one of ``_OWN``'s tags, ``sdk:<type>`` or ``other``."""
    if isinstance(value, BaseModel):  # serialising, or an item built in code: its own class decides
        own = _TAG_OF_CLASS.get(type(value))
        if own is not None:
            return own
    kind = _field(value, "type")
    if kind is None and isinstance(value, dict):  # NeMo Gym infers typeless input items from their keys
        if "role" in value and "content" in value:
            kind = "message"
        elif "arguments" in value and "name" in value and "call_id" in value:
            kind = "function_call"
        elif "call_id" in value and "output" in value:
            kind = "function_call_output"
        elif isinstance(value.get("summary"), list):
            kind = "reasoning"
    if kind == "message":
        tag = _message_tag(value)
    elif kind == "function_call_output":
        full = isinstance(_field(value, "id"), str) and _field(value, "status") in _STATUSES
        tag = "sdk:function_call_output" if output and full else "function_call_output_input"
    elif kind in ("function_call", "reasoning"):
        tag = kind
    elif isinstance(kind, str) and kind in (_SDK_OUTPUT if output else _SDK_INPUT):
        return f"sdk:{kind}"
    else:
        return "other"
    if tag in _TRAINING and all(_field(value, name) is not None for name in TOKEN_FIELDS):
        return tag + ":training"
    return tag


def _union(output: bool) -> Any:
    members: list[Any] = [Annotated[cls, Tag(tag)] for tag, cls in _OWN.items()]
    members += [Annotated[cls, Tag(f"{tag}:training")] for tag, cls in _TRAINING.items()]
    sdk = dict(_SDK_OUTPUT if output else _SDK_INPUT)
    if output:
        sdk["function_call_output"] = NeMoGymResponseFunctionCallOutput
    members += [Annotated[cls, Tag(f"sdk:{kind}")] for kind, cls in sdk.items()]
    members.append(Annotated[NeMoGymOtherItem, Tag("other")])
    return Annotated[typing.Union[tuple(members)], Discriminator(lambda v: _item_tag(v, output=output))]  # noqa: UP007


def _require_type(value: Any) -> Any:
    if isinstance(value, dict) and "type" not in value:
        raise ValueError("Responses API output items must include a type discriminator")
    return value


if TYPE_CHECKING:  # what the unions below validate into (at run time they are built from the installed SDK)
    _NeMoGymItem: TypeAlias = (
        NeMoGymEasyInputMessage
        | NeMoGymMessage
        | NeMoGymResponseOutputMessage
        | NeMoGymResponseFunctionToolCall
        | NeMoGymFunctionCallOutput
        | NeMoGymResponseReasoningItem
        | NeMoGymOtherItem
    )
    NeMoGymResponseInputItem: TypeAlias = _NeMoGymItem | ResponseInputItem
    NeMoGymResponseOutputItem: TypeAlias = _NeMoGymItem | NeMoGymResponseFunctionCallOutput | ResponseOutputItem
else:
    NeMoGymResponseInputItem = _union(output=False)
    NeMoGymResponseOutputItem = Annotated[_union(output=True), BeforeValidator(_require_type)]
NeMoGymResponseInput: TypeAlias = list[NeMoGymResponseInputItem]


# ---- request parameters -----------------------------------------------------------------------------


def _as_is(value: Any) -> Any:
    return value


#: A before-validator that changes nothing: what it wraps is validated from the Python objects pydantic-core
#: makes of the JSON once, not from the JSON itself. Read from JSON, a union of models holding ``Dict[str, object]``
#: (the SDK's tools: their parameters' JSON schema) builds that dict again for each member it tries: on NeMo Gym's
#: tool environments the body took 3-15x as long to validate as ``json.loads`` plus Python validation (issue 22,
#: structured_outputs 7.4 ms vs 0.5 ms per verify body). Same values, same errors, either way.
_FROM_PYTHON = BeforeValidator(_as_is)


class NeMoGymResponseCreateParamsNonStreaming(ResponseCreateParams):
    """``responses_create_params``: ngym's strict request fields (an unknown key is an error), with the OpenAI
    SDK's input items and tool types, as NeMo Gym declares them."""

    # the SDK's types in place of ngym's own wire models: a type checker sees incompatible fields
    input: str | NeMoGymResponseInput  # type: ignore[assignment]
    tool_choice: ToolChoice = "auto"  # type: ignore[assignment]
    tools: list[ToolParam] = Field(default_factory=list)  # type: ignore[assignment]

    @model_validator(mode="before")
    @classmethod
    def _from_python(cls, data: Any) -> Any:
        """The whole of it from Python objects (see ``_FROM_PYTHON``): its tools and the ``text`` format's schema."""
        return data


# ---- responses --------------------------------------------------------------------------------------


class NeMoGymResponseInputTokensDetails(BaseModel):
    """Not the SDK's class: its required fields change between SDK releases, and servers report fewer."""

    model_config = ConfigDict(extra="allow")

    cached_tokens: int | None = None


class NeMoGymResponseOutputTokensDetails(BaseModel):
    model_config = ConfigDict(extra="allow")

    reasoning_tokens: int | None = None


class NeMoGymResponseUsage(ResponseUsage):
    # not the SDK's detail classes (see above), so a type checker sees an incompatible field
    input_tokens_details: NeMoGymResponseInputTokensDetails  # type: ignore[assignment]
    output_tokens_details: NeMoGymResponseOutputTokensDetails  # type: ignore[assignment]


def _add_counts(left: int | None, right: int | None) -> int | None:
    # An unknown count stays unknown: adding a known one to it would report a measurement nobody made.
    return None if left is None or right is None else left + right


def accumulate_response_usage(
    total: NeMoGymResponseUsage | None, additional: NeMoGymResponseUsage | None
) -> NeMoGymResponseUsage | None:
    """``total`` plus ``additional`` (token counts and their cached/reasoning details), as a new object;
    either side may be ``None`` (nothing to add, or nothing counted yet)."""
    if additional is None:
        return total
    if total is None:
        return additional.model_copy(deep=True)
    result = total.model_copy(deep=True)
    result.input_tokens += additional.input_tokens
    result.output_tokens += additional.output_tokens
    result.total_tokens += additional.total_tokens
    if result.input_tokens_details is not None and additional.input_tokens_details is not None:
        result.input_tokens_details.cached_tokens = _add_counts(
            result.input_tokens_details.cached_tokens, additional.input_tokens_details.cached_tokens
        )
    if result.output_tokens_details is not None and additional.output_tokens_details is not None:
        result.output_tokens_details.reasoning_tokens = _add_counts(
            result.output_tokens_details.reasoning_tokens, additional.output_tokens_details.reasoning_tokens
        )
    return result


class NeMoGymResponse(Response):
    """The finished response (the OpenAI SDK's ``Response``); ``output`` is the whole trajectory."""

    output: list[NeMoGymResponseOutputItem]  # type: ignore[assignment]  # NeMo Gym's item models and the SDK's
    usage: NeMoGymResponseUsage | None = None
    tools: Annotated[list[Tool], _FROM_PYTHON]

    def function_calls(self) -> list[NeMoGymResponseFunctionToolCall]:
        """The tool calls of the trajectory, in order (the method ngym's own ``Response`` has, which ngym's verify
        route uses, e.g. to strip MCP namespaces from tool names)."""
        return [item for item in self.output if isinstance(item, NeMoGymResponseFunctionToolCall)]
