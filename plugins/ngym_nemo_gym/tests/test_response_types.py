"""Response objects behave as the OpenAI SDK's types, which NeMo Gym environments rely on.

With plain dicts in their place, NeMo Gym's ``lc_niah`` crashes on a reasoning item (``summary[i].text``) or,
reading its input messages with ``getattr(item, "content", None)``, sees no input and so never penalises
reasoning that copies it: a silently too-high reward. The test below pins the right rewards through ngym's HTTP
route on NeMo's own environment.
"""

from __future__ import annotations

from typing import Any

import pytest
from nemo_gym.openai_utils import (
    NeMoGymEasyInputMessage,
    NeMoGymResponse,
    NeMoGymResponseCreateParamsNonStreaming,
    NeMoGymResponseFunctionToolCall,
    NeMoGymResponseOutputMessage,
    NeMoGymResponseReasoningItem,
)
from openai.types.responses import FunctionTool, ResponseOutputMessage
from pydantic import BeforeValidator

from ngym.testing import app_for_class, serve_in_process

HAYSTACK = " ".join(f"node{i} points to node{i + 1} in the directed graph of this task" for i in range(12))


def _response(reasoning: str, answer: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_1", "created_at": 0.0, "model": "m", "object": "response",
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": reasoning}]},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": answer, "annotations": []}]},
        ],
        **extra,
    }  # fmt: skip


def test_items_are_sdk_objects_with_attribute_access() -> None:
    response = NeMoGymResponse.model_validate(
        _response(
            "thinking",
            "done",
            status="incomplete",
            incomplete_details={"reason": "max_output_tokens"},
            tools=[{"type": "function", "name": "get_weather", "parameters": {}, "strict": True}],
        )
    )
    reasoning, message = response.output
    assert isinstance(reasoning, NeMoGymResponseReasoningItem)
    assert reasoning.summary[0].text == "thinking"
    assert isinstance(message, NeMoGymResponseOutputMessage) and isinstance(message, ResponseOutputMessage)
    assert message.content[0].text == "done"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert isinstance(response.tools[0], FunctionTool) and response.tools[0].name == "get_weather"


def test_prompt_messages_inside_a_responses_output_are_kept_as_messages() -> None:
    # Local agents put the prompt (system/user messages) and tool results into the returned trajectory.
    output = [
        {"type": "message", "role": "system", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    response = NeMoGymResponse.model_validate({**_response("r", "a"), "output": output})
    system, user, call, result = response.output
    assert isinstance(system, NeMoGymEasyInputMessage) and system.role == "system" and system.content == "be brief"
    assert user.role == "user" and user.content[0]["text"] == "hi"  # input parts stay dicts, as in NeMo Gym
    assert isinstance(call, NeMoGymResponseFunctionToolCall) and call.name == "f"
    assert result.output == "ok"


def test_output_items_need_a_type_and_params_are_strict() -> None:
    with pytest.raises(ValueError, match="type discriminator"):
        NeMoGymResponse.model_validate({**_response("r", "a"), "output": [{"role": "assistant", "content": []}]})
    with pytest.raises(ValueError, match="Extra inputs"):
        NeMoGymResponseCreateParamsNonStreaming.model_validate({"input": "hi", "not_a_field": 1})
    # NeMo Gym 0.7.0's client sends these two: they must be accepted.
    NeMoGymResponseCreateParamsNonStreaming.model_validate(
        {"input": "hi", "conversation": "c", "context_management": []}
    )


@pytest.mark.parametrize(
    ("reasoning", "reward"),
    [
        ("I will look for the nodes two steps from node3 and list them.", 1.0),
        (HAYSTACK, 0.0),  # the reasoning copies the input: multiply rule → 1.0 × (1 − overlap 1.0)
    ],
)
async def test_lc_niah_penalises_reasoning_that_copies_its_input(
    import_nemo_app: Any, reasoning: str, reward: float
) -> None:
    app_module = import_nemo_app("lc_niah")
    app = app_for_class(
        app_module.LCNIAHResourcesServer, name="lc_niah", domain="long_context", overlap_grading_rule="multiply"
    )
    body = {
        "responses_create_params": {"input": [{"role": "user", "content": HAYSTACK}]},
        "expected_answer": '["node5"]',
        "response": _response(reasoning, "Final Answer: [node5]"),
    }
    async with serve_in_process(app) as client:
        answer = await client.post("/verify", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["answer_score"] == 1.0
    assert answer.json()["reward"] == pytest.approx(reward)


def test_training_token_fields_survive_a_round_trip() -> None:
    # A training-time model server attaches token ids and log-probs; verify echoes the response back to the
    # trainer, so dropping them on the way out would silently lose the training signal.
    message = {
        "type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "4", "annotations": []}],
        "prompt_token_ids": [1, 2], "generation_token_ids": [3], "generation_log_probs": [-0.5],
        "routed_experts": [[0, 1]],
    }  # fmt: skip
    response = NeMoGymResponse.model_validate({**_response("r", "a"), "output": [message]})
    dumped = response.model_dump(mode="json")["output"][0]
    assert dumped["prompt_token_ids"] == [1, 2] and dumped["generation_log_probs"] == [-0.5]
    assert dumped["routed_experts"] == [[0, 1]]
    assert NeMoGymResponse.model_validate(response.model_dump(mode="json")) == response


def test_a_typed_seed_answer_takes_nemos_sandbox_access_model() -> None:
    """swebench_pro builds ``ResourcesSeedSessionResponse(sandbox_access=SandboxAccess(...))`` as NeMo types it."""
    from nemo_gym.base_resources_server import ResourcesSeedSessionResponse
    from nemo_gym.sandbox.access import DirectSandboxConnection, SandboxAccess

    access = SandboxAccess(
        connection=DirectSandboxConnection(provider_config_ref="local", descriptor={"id": "box-1"}), workdir="/app"
    )
    answer = ResourcesSeedSessionResponse(resources_session_id="s", sandbox_access=access)
    dumped = answer.model_dump(mode="json", exclude_none=True)
    assert dumped["sandbox_access"]["workdir"] == "/app"
    assert dumped["sandbox_access"]["connection"]["descriptor"] == {"id": "box-1"}
    assert ResourcesSeedSessionResponse.model_validate(dumped).sandbox_access == access


def _tool(index: int) -> dict[str, Any]:
    schema = {"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(20)}}
    return {"type": "function", "name": f"tool_{index}", "description": "d", "parameters": schema, "strict": True}


def test_a_json_body_with_tools_reads_as_the_same_objects_through_python() -> None:
    """Read straight from JSON, the request and the response validate their SDK tool unions from Python objects
    (issue 22: from JSON, pydantic-core rebuilt each tool's schema dict for every union member it tried; a
    structured_outputs verify body took 7.4 ms instead of 0.5 ms). The objects are the same as before either way."""
    import json

    params = {
        "input": "q",
        "tools": [_tool(i) for i in range(3)],
        "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
    }
    response = _response("r", "a", tools=[_tool(i) for i in range(3)])
    for model, body in ((NeMoGymResponseCreateParamsNonStreaming, params), (NeMoGymResponse, response)):
        from_json = model.model_validate_json(json.dumps(body))
        assert from_json == model.model_validate(body)
    assert isinstance(NeMoGymResponse.model_validate_json(json.dumps(response)).tools[0], FunctionTool)
    # the reading from Python objects itself: a before-validator around the params, and around the response's tools
    validators = NeMoGymResponseCreateParamsNonStreaming.__pydantic_decorators__.model_validators.values()
    assert [v.info.mode for v in validators] == ["before"]
    assert any(isinstance(m, BeforeValidator) for m in NeMoGymResponse.model_fields["tools"].metadata)


def test_a_bad_tool_is_refused_alike_from_json_and_from_python() -> None:
    import json

    from pydantic import ValidationError

    params = {"input": "q", "tools": [{"type": "function", "name": 3, "parameters": {}}]}
    with pytest.raises(ValidationError) as from_json:
        NeMoGymResponseCreateParamsNonStreaming.model_validate_json(json.dumps(params))
    with pytest.raises(ValidationError) as from_python:
        NeMoGymResponseCreateParamsNonStreaming.model_validate(params)
    assert [e["loc"] for e in from_json.value.errors()] == [e["loc"] for e in from_python.value.errors()]
