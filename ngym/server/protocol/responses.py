"""OpenAI Responses API types, as NeMo Gym validates them.

Faithful pydantic models of the parts of the OpenAI Responses API that resources servers read: the strict
request parameters (``responses_create_params``) and the finished ``Response`` whose ``output`` is the whole
trajectory. They are ours rather than the ``openai`` package's so that a server starts in a fraction of a
second (importing ``openai`` alone costs ~0.8 s); the field names and shapes follow ``openai.types.responses``.
Item types ngym does not model (web search calls, computer calls, ...) are kept as ``OtherItem`` with all
their fields, so a trajectory round-trips through ``model_dump()`` unchanged.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator


class _Item(BaseModel):
    """Base of trajectory items: unknown fields are kept (the OpenAI SDK's models allow extras too)."""

    model_config = ConfigDict(extra="allow")


def _absent(value: Any) -> bool:
    return value is None


class _TrainingTokens(_Item):
    """Token ids and log-probs a training-time model server attaches: all three or none.

    Absent ones are left out when the item is written back (the verify echo): NeMo Gym's training variants
    declare them as lists, so an explicit ``null`` would fail its validation of every echoed item.
    """

    prompt_token_ids: list[int] | None = Field(default=None, exclude_if=_absent)
    generation_token_ids: list[int] | None = Field(default=None, exclude_if=_absent)
    generation_log_probs: list[float] | None = Field(default=None, exclude_if=_absent)

    @model_validator(mode="after")
    def _all_or_none(self) -> _TrainingTokens:
        present = [f is not None for f in (self.prompt_token_ids, self.generation_token_ids, self.generation_log_probs)]
        if any(present) and not all(present):
            raise ValueError("prompt_token_ids, generation_token_ids and generation_log_probs go together: all or none")
        return self


class OutputText(_Item):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)


class Refusal(_Item):
    type: Literal["refusal"] = "refusal"
    refusal: str


class OutputMessage(_TrainingTokens):
    """An assistant message in a response's output."""

    type: Literal["message"] = "message"
    id: str = ""
    role: Literal["assistant"] = "assistant"
    status: str = "completed"
    content: list[Annotated[OutputText | Refusal, Field(discriminator="type")]]

    @property
    def text(self) -> str:
        return "".join(part.text for part in self.content if isinstance(part, OutputText))


class FunctionCall(_TrainingTokens):
    """The model asks for a tool: ``arguments`` is a JSON string, as the model wrote it."""

    type: Literal["function_call"] = "function_call"
    name: str
    arguments: str
    call_id: str
    id: str | None = None
    status: str | None = None

    def parsed_arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises ValueError when they are not a JSON object."""
        value = json.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError(f"arguments of {self.name} are not a JSON object: {self.arguments[:200]}")
        return value


class FunctionCallOutput(_Item):
    """What a tool returned, as the agent fed it back to the model."""

    type: Literal["function_call_output"] = "function_call_output"
    call_id: str
    output: str | list[Any]
    id: str | None = None
    status: str | None = None


class ReasoningItem(_Item):
    type: Literal["reasoning"] = "reasoning"
    id: str = ""
    summary: list[Any] = Field(default_factory=list)
    content: list[Any] | None = None
    encrypted_content: str | None = None


class InputMessage(_Item):
    """A message in the input: ``role`` user/assistant/system/developer, ``content`` a string or parts."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Any]


class OtherItem(_Item):
    """Any other item type (web search calls, computer calls, ...), kept as sent."""

    type: str


_OUTPUT_TAGS = {"message", "function_call", "function_call_output", "reasoning"}


def _known_tag(kind: Any) -> str:
    # ``type`` may be any JSON value in a malformed item (an object is unhashable): such items are "other",
    # whose model then answers 422 (``type`` must be a string), as NeMo Gym does.
    return kind if isinstance(kind, str) and kind in _OUTPUT_TAGS else "other"


def _output_tag(value: Any) -> str:
    return _known_tag(value.get("type") if isinstance(value, dict) else getattr(value, "type", None))


def _input_tag(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("type", "message" if "role" in value else None)
        role = value.get("role")
    else:
        kind, role = getattr(value, "type", None), getattr(value, "role", None)
    if kind == "message":
        # An assistant message echoed back from a previous output has output_text parts and an id/status.
        return "input_message" if role != "assistant" or _looks_like_input(value) else "message"
    return _known_tag(kind)


def _looks_like_input(value: Any) -> bool:
    content = value.get("content") if isinstance(value, dict) else getattr(value, "content", None)
    return isinstance(content, str)


OutputItem = Annotated[
    Annotated[OutputMessage, Tag("message")]
    | Annotated[FunctionCall, Tag("function_call")]
    | Annotated[FunctionCallOutput, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_output_tag),
]

InputItem = Annotated[
    Annotated[InputMessage, Tag("input_message")]
    | Annotated[OutputMessage, Tag("message")]
    | Annotated[FunctionCall, Tag("function_call")]
    | Annotated[FunctionCallOutput, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_input_tag),
]


class ResponseCreateParams(BaseModel):
    """``responses_create_params``: strict, like NeMo Gym's (an unknown key is a 422). Non-streaming only.

    The fields are those of NeMo Gym 0.7.0's ``NeMoGymResponseCreateParamsNonStreaming`` (the OpenAI SDK's
    ``ResponseCreateParamsNonStreaming``): its agents dump every field, ``None`` included, into the bodies
    they send, so a field missing here turns every one of their ``/verify`` calls into a 422.
    """

    model_config = ConfigDict(extra="forbid")

    input: str | list[InputItem]
    background: bool | None = None
    context_management: list[dict[str, Any]] | None = None
    conversation: str | dict[str, Any] | None = None
    include: list[str] | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, str] | None = None
    model: str | None = None
    moderation: dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    prompt: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    reasoning: dict[str, Any] | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    store: bool | None = None
    stream: Literal[False] | None = None
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None
    text: dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_logprobs: int | None = None
    top_p: float | None = None
    truncation: str | None = None
    user: str | None = None


class Response(BaseModel):
    """A finished OpenAI Responses object; ``output`` is the whole trajectory."""

    model_config = ConfigDict(extra="allow")

    id: str
    created_at: float
    model: str
    object: Literal["response"] = "response"
    output: list[OutputItem]
    parallel_tool_calls: bool
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    status: str | None = None
    background: bool | None = None
    completed_at: float | None = None
    conversation: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None
    instructions: str | list[Any] | None = None
    metadata: dict[str, str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    previous_response_id: str | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    truncation: str | None = None
    usage: dict[str, Any] | None = None
    user: str | None = None

    def function_calls(self) -> list[FunctionCall]:
        """The tool calls of the trajectory, in order."""
        return [item for item in self.output if isinstance(item, FunctionCall)]

    def final_text(self) -> str:
        """Text of the last assistant message ('' when the response has none)."""
        for item in reversed(self.output):
            if isinstance(item, OutputMessage):
                return item.text
        return ""

    @property
    def output_text(self) -> str:
        """All output_text parts of all assistant messages, joined (as the OpenAI SDK's ``output_text``)."""
        return "".join(item.text for item in self.output if isinstance(item, OutputMessage))
