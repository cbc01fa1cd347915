"""The OpenEnv front's per-row encodings (``rows.ReadyRow``) and its parsed reset messages (``RepeatedMessages``):
what they send is what encoding the whole value sends, byte for byte, and what they share is never changed."""

from __future__ import annotations

import copy
import json
from typing import Any

import pydantic_core
from fastapi.testclient import TestClient

from ngym.examples import dataset_row, read_example_rollouts, recorded_tool_calls
from ngym.server.fronts.openenv import MOUNT_PATH
from ngym.server.fronts.openenv.rows import KEPT_ROWS, MESSAGE_MIN_CHARS, ReadyRow, RepeatedMessages, RowPicker
from ngym.server.protocol import ROLLOUT_INDEX_KEY, TASK_INDEX_KEY, Response
from ngym.targets import resolve
from ngym.testing import app_for

ROW: dict[str, Any] = {
    "responses_create_params": {"input": 'é \u2028 "q"', "tools": [{"type": "function", "name": "f"}]},
    "ground_truth": [1.5, None, True],
}


def _rollout() -> dict[str, Any]:
    folder = resolve("workplace_assistant").folder
    assert folder is not None
    return read_example_rollouts(folder / "data" / "example_rollouts.jsonl")[0]


def test_a_ready_row_sends_what_encoding_the_whole_value_sends() -> None:
    available = [{"type": "function", "name": "f"}]
    ready = ReadyRow(ROW, {"f"}, available)
    for indices in ({ROLLOUT_INDEX_KEY: 3}, {TASK_INDEX_KEY: 0, ROLLOUT_INDEX_KEY: 1}):
        assert ready.seed_body(indices) == pydantic_core.to_json({**ROW, **indices})
    given_index = {**ROW, TASK_INDEX_KEY: 7}  # a row carrying an index already: the reset's own wins, in place
    indices = {TASK_INDEX_KEY: 2, ROLLOUT_INDEX_KEY: 0}
    assert ReadyRow(given_index, None, []).seed_body(indices) == pydantic_core.to_json({**given_index, **indices})
    assert ReadyRow({}, None, []).seed_body({ROLLOUT_INDEX_KEY: 0}) == pydantic_core.to_json({ROLLOUT_INDEX_KEY: 0})
    rest = {"task_index": None, "episode_id": "e1", "seed": {"x": [1]}}
    expected: dict[str, Any] = {"prompt": [{"role": "user", "content": ROW["responses_create_params"]["input"]}]}
    expected |= {"available_tools": available, **rest}
    assert ready.observation_json(rest) == pydantic_core.to_json(expected)
    assert ready.tools == pydantic_core.to_json(ROW["responses_create_params"]["tools"])
    assert ready.declared == frozenset({"f"})


def test_rows_sent_whole_are_made_ready_once_per_object_and_bounded() -> None:
    picker = RowPicker([ROW])
    made: list[dict[str, Any]] = []

    def describe(row: dict[str, Any]) -> tuple[set[str] | None, list[dict[str, Any]]]:
        made.append(row)
        return None, []

    sent = {**ROW, "response": {"output": []}, "reward": 1.0}  # a recorded line: its recording is left out
    first, index = picker.pick_ready({"row": sent, "task_index": 4}, describe)
    again, _ = picker.pick_ready({"row": sent}, describe)
    assert again is first and index == 4 and len(made) == 1 and first.row == ROW
    assert picker.pick_ready({"row": dict(sent)}, describe)[0] is not first  # another object: made again
    own, own_index = picker.pick_ready({"task_index": 0}, describe)
    assert own_index == 0 and picker.pick_ready({"task_index": 0}, describe)[0] is own
    kept = [{**ROW, "n": n} for n in range(KEPT_ROWS + 5)]  # held here, so no id is reused while the test runs
    for row in kept:
        picker.pick_ready({"row": row}, describe)
    assert len(picker._given) == KEPT_ROWS


def test_reset_messages_are_parsed_once_and_bounded() -> None:
    messages = RepeatedMessages()
    padding = "x" * MESSAGE_MIN_CHARS
    reset = json.dumps({"type": "reset", "data": {"row": {**ROW, "pad": padding}}})
    assert messages.parse(reset) is messages.parse(reset[:] + "")  # equal text, parsed once
    step = json.dumps({"type": "step", "data": {"message": padding}})
    assert messages.parse(step) is not messages.parse(step)  # only resets are kept
    short = json.dumps({"type": "reset", "data": {}})
    assert messages.parse(short) == {"type": "reset", "data": {}}
    for n in range(KEPT_ROWS + 3):
        messages.parse(json.dumps({"type": "reset", "data": {"n": n, "pad": padding}}))
    assert len(messages._known) == KEPT_ROWS


def test_repeated_resets_of_one_row_score_alike_and_leave_the_shared_row_unchanged() -> None:
    """Three episodes over two sockets resetting with the same message text: each is scored as recorded, each
    reset answers the same observation (its episode id aside), and the parsed message they shared is as parsed."""
    rollout = _rollout()
    raw = json.dumps({"type": "reset", "data": {"row": dataset_row(rollout)}})
    app = app_for("workplace_assistant")
    with TestClient(app) as client:
        answers: list[dict[str, Any]] = []
        for _ in range(2):
            with client.websocket_connect(f"{MOUNT_PATH}/ws") as socket:
                for _ in range(1 if answers else 2):
                    socket.send_text(raw)
                    reset = json.loads(socket.receive_text())
                    reset["data"]["observation"].pop("episode_id")
                    answers.append(reset)
                    for call in recorded_tool_calls(rollout["response"]):
                        step = {"tool_name": call.name, "arguments": call.arguments}
                        socket.send_json({"type": "step", "data": step})
                        socket.receive_json()
                    final_text = Response.model_validate(rollout["response"]).final_text()
                    socket.send_json({"type": "step", "data": {"message": final_text}})
                    assert socket.receive_json()["data"]["reward"] == rollout["reward"]
        mounted: Any = next(r for r in app.router.routes if getattr(r, "path", None) == MOUNT_PATH)
        front = mounted.app.app.state.front
        shared = front.messages.parse(raw)
    assert answers[0] == answers[1] == answers[2]
    tools = dataset_row(rollout)["responses_create_params"]["tools"]
    assert answers[0]["data"]["observation"]["available_tools"] == tools
    assert shared == copy.deepcopy(json.loads(raw))
