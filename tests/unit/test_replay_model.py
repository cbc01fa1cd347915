"""The replay model in-process: matching a request to its row, the next recorded turn, ground truth, the judge."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ngym.rollout.replay_model import create_replay_app, plan_for
from ngym.rollout.scripted_judge import ScriptedJudge, normalise

INPUT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 then 3."}]


def _fc(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(args), "id": call_id}


def _out(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "{}"}


FINAL = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "5"}]}
RECORDED = {
    "responses_create_params": {"input": INPUT},
    "response": {
        "output": [
            {"type": "reasoning", "id": "rs", "summary": []},
            _fc("a", "add", {"n": 2}),
            _fc("b", "add", {"n": 3}),  # two calls in one turn
            _out("a"),
            _out("b"),
            _fc("c", "total", {}),
            _out("c"),
            FINAL,
        ]
    },
}


def test_recorded_output_splits_into_turns() -> None:
    plan = plan_for(RECORDED, 0)
    assert plan is not None and plan.source == "recorded"
    assert [[i.get("call_id", i["type"]) for i in turn] for turn in plan.turns] == [
        ["reasoning", "a", "b"],
        ["c"],
        ["message"],
    ]
    assert plan.tool_outputs_before == [0, 2, 3]
    assert plan.next_turn(0)[1]["call_id"] == "a" and plan.next_turn(2)[0]["call_id"] == "c"
    assert plan.next_turn(3) == [FINAL] and plan.next_turn(9) == [FINAL]


def test_ground_truth_calls_one_at_a_time_then_done() -> None:
    row = {"responses_create_params": {"input": "x"}, "ground_truth": [{"name": "t", "arguments": {"k": 1}}]}
    plan = plan_for(row, 0)
    assert plan is not None and plan.source == "ground_truth"
    assert plan.next_turn(0)[0]["arguments"] == '{"k": 1}'
    assert plan.next_turn(1)[0]["content"][0]["text"] == "Done."


async def _post(app: Any, path: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://replay") as client:
        return await client.post(path, json=body)


async def test_request_matched_by_input_prefix_ignoring_ids_and_part_shapes() -> None:
    app = create_replay_app([RECORDED])
    echoed_input = [
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be brief."}]},
        {"type": "message", "role": "user", "content": "Add 2 then 3."},
    ]
    first = (await _post(app, "/v1/responses", {"model": "m", "input": echoed_input})).json()
    assert [i.get("call_id") for i in first["output"]] == [None, "a", "b"]
    history = echoed_input + first["output"] + [_out("a"), _out("b")]
    second = (await _post(app, "/v1/responses", {"model": "m", "input": history})).json()
    assert second["output"][0]["call_id"] == "c" and second["object"] == "response"


async def test_unknown_input_is_a_400_in_openai_error_shape() -> None:
    response = await _post(create_replay_app([RECORDED]), "/v1/responses", {"model": "m", "input": "hello?"})
    assert response.status_code == 400 and "no recording for this input" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [("Paris", "paris.", True), ("8", "8.0", True), ("1,000", "1000", True), ("Au", "Ag", False)],
)
async def test_scripted_judge_on_both_apis(a: str, b: str, equal: bool) -> None:
    prompt = f"Q\n<answer_a>\n{a}\n</answer_a>\n<answer_b>\n{b}\n</answer_b>\nanswer [[A=B]] or [[A!=B]]"
    app = create_replay_app([])
    label = "[[A=B]]" if equal else "[[A!=B]]"
    responses = (await _post(app, "/v1/responses", {"input": [{"role": "user", "content": prompt}]})).json()
    assert responses["output"][0]["content"][0]["text"].endswith(label)
    chat = (await _post(app, "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]})).json()
    assert chat["choices"][0]["message"]["content"].endswith(label)


def test_exact_match_mode_and_normalise() -> None:
    prompt = "<answer_a>Paris</answer_a><answer_b>paris</answer_b>"
    assert ScriptedJudge(match="exact").verdict(prompt).endswith("[[A!=B]]")
    assert normalise(" $3.50 ") == "3.5" and normalise("Jane  Austen.") == "jane austen"
