"""The Responses output → verifiers' chat messages rule (ngym_verifiers.messages)."""

from ngym_verifiers.messages import chat_messages


def text_item(text: str) -> dict[str, object]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, object]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def result(call_id: str, output: str) -> dict[str, object]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def test_parallel_calls_of_one_turn_are_one_assistant_message() -> None:
    messages = chat_messages(
        [call("a", "deposit", '{"amount": 3}'), call("b", "balance"), result("a", "8"), result("b", "8")]
        + [text_item("8")]
    )
    assert [m["role"] for m in messages] == ["assistant", "tool", "tool", "assistant"]
    assert [c["id"] for c in messages[0]["tool_calls"]] == ["a", "b"]
    assert messages[0]["tool_calls"][0] == {"id": "a", "name": "deposit", "arguments": '{"amount": 3}'}
    assert messages[1] == {"role": "tool", "tool_call_id": "a", "content": "8"}
    assert messages[-1] == {"role": "assistant", "content": "8"}


def test_a_call_after_a_tool_result_starts_the_next_turn() -> None:
    messages = chat_messages([call("a", "t"), result("a", "1"), call("b", "t"), result("b", "2")])
    assert [m["role"] for m in messages] == ["assistant", "tool", "assistant", "tool"]
    assert messages[0]["content"] is None


def test_text_then_calls_is_one_message_and_reasoning_goes_on_the_next_one() -> None:
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]}
    messages = chat_messages([reasoning, text_item("let me look"), call("a", "t"), result("a", "x")])
    assert messages[0]["content"] == "let me look"
    assert messages[0]["reasoning_content"] == "think"
    assert [c["name"] for c in messages[0]["tool_calls"]] == ["t"]


def test_an_empty_output_is_no_messages() -> None:
    assert chat_messages([]) == []
