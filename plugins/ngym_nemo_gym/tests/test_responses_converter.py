"""Responses request → Chat Completions request, as a chat model must see the trajectory."""

from __future__ import annotations

import pytest
from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.responses_converter import ResponsesConverter

CONVERTER = ResponsesConverter(return_token_id_information=False)


def test_a_tool_using_trajectory_becomes_chat_messages() -> None:
    params = NeMoGymResponseCreateParamsNonStreaming(
        model="m",
        instructions="Be brief.",
        max_output_tokens=64,
        input=[
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
            {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "call it"}]},
            {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Paris"}', "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": "cold"},
            {"role": "assistant", "content": "It is cold."},
        ],
        tools=[{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": True}],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    chat = CONVERTER.responses_to_chat_completion_create_params(params)
    assert chat.messages == [
        {"role": "system", "content": "Be brief.\n\nUse tools."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "content": "<think>call it</think>",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "cold"},
        {"role": "assistant", "content": "It is cold."},
    ]
    assert chat.tools == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "strict": True}}
    ]
    assert chat.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert (chat.model, chat.max_tokens) == ("m", 64)


def test_what_chat_cannot_express_is_refused_by_name() -> None:
    with pytest.raises(NotImplementedError, match="previous_response_id"):
        CONVERTER.responses_to_chat_completion_create_params(
            NeMoGymResponseCreateParamsNonStreaming(input="hi", previous_response_id="resp_1")
        )
