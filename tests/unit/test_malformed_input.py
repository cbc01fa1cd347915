"""Malformed input is a clear 4xx on every route, never a 500; a 422 never echoes a large input back."""

from __future__ import annotations

import json

import httpx
import pytest

from ngym.server.pipeline.intake import parse_json, preview
from ngym.testing import RolloutClient, make_response

DEEP = b"[" * 100_000 + b"]" * 100_000
JSON = {"content-type": "application/json"}


def typed_seed(session_id: str = "s-1", task_data: str = '{"initial_count": 1}') -> bytes:
    return (
        b'{"resources_session_id": "%s", "episode_id": {"rollout_id": "r", "attempt": 0},'
        b' "task_id": {"taskset": "t", "task_id": "1"}, "task_data": %s}' % (session_id.encode(), task_data.encode())
    )


@pytest.mark.parametrize("kind", [{"a": 1}, [1, 2], 3, None, True])
async def test_an_output_item_whose_type_is_not_a_string_is_422(counter_http: httpx.AsyncClient, kind: object) -> None:
    response = make_response(text="done")
    response["output"].append({"type": kind, "id": "x"})
    verified = await counter_http.post(
        "/verify", json={"responses_create_params": {"input": "x"}, "expected_count": 0, "response": response}
    )
    assert verified.status_code == 422, verified.text
    assert verified.json()["detail"][0]["loc"][-1] == "type"


async def test_an_input_item_whose_type_is_not_a_string_is_422(counter_http: httpx.AsyncClient) -> None:
    params = {"input": [{"type": {"a": 1}, "role": "user", "content": "hi"}]}
    body = {"responses_create_params": params, "expected_count": 0, "response": make_response()}
    assert (await counter_http.post("/verify", json=body)).status_code == 422


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/close_session", b'{"resources_session_id": "a", "episode_id": ' + DEEP + b"}"),
        ("/seed_session", typed_seed(task_data='{"a": ' + DEEP.decode() + "}")),
    ],
    ids=["deep-close", "deep-typed-seed"],
)
async def test_deep_json_to_seed_and_close_is_400(counter_http: httpx.AsyncClient, path: str, body: bytes) -> None:
    answered = await counter_http.post(path, content=body, headers=JSON)
    assert answered.status_code == 400, answered.text
    assert "not valid JSON" in answered.json()["detail"]
    assert (await counter_http.get("/health")).json()["live_sessions"] == 0


async def test_deep_json_to_a_tool_or_verify_is_422(counter_http: httpx.AsyncClient) -> None:
    rollout = RolloutClient(counter_http)
    await rollout.call("/seed_session", {"initial_count": 0})
    for path in ("/increment_counter", "/verify"):
        body = b'{"count": ' + DEEP + b"}"
        answered = await counter_http.post(path, content=body, headers={**JSON, "cookie": rollout.cookie or ""})
        assert answered.status_code == 422, answered.text
        assert answered.json()["detail"][0]["type"] == "json_invalid"


async def test_a_lone_surrogate_a_tool_echoes_is_the_replacement_character(weather_http: httpx.AsyncClient) -> None:
    answered = await weather_http.post("/get_weather", content=b'{"city": "a\\ud800b"}', headers=JSON)
    assert answered.status_code == 200, answered.text
    assert answered.json()["city"] == "a\ufffdb"
    ok = await weather_http.post("/get_weather", content=b'{"city": "\\ud83d\\ude00"}', headers=JSON)  # a valid pair
    assert ok.status_code == 200 and ok.json()["city"] == "\U0001f600"


async def test_a_lone_surrogate_in_model_output_does_not_lose_the_rollout(counter_http: httpx.AsyncClient) -> None:
    """Model output relayed by the client may carry a lone surrogate escape; NeMo Gym scores it, so must we."""
    rollout = RolloutClient(counter_http)
    await rollout.call("/seed_session", {"initial_count": 0})
    body = {"responses_create_params": {"input": "x"}, "expected_count": 0, "response": make_response(text="SLOT")}
    raw = json.dumps(body).replace("SLOT", "\\udcff").encode()
    verified = await counter_http.post("/verify", content=raw, headers={**JSON, "cookie": rollout.cookie or ""})
    assert verified.status_code == 200, verified.text
    assert verified.json()["reward"] == 1.0
    assert verified.json()["response"]["output"][0]["content"][0]["text"] == "\ufffd"


async def test_a_lone_surrogate_session_id_is_refused_by_the_id_rule(counter_http: httpx.AsyncClient) -> None:
    answered = await counter_http.post("/seed_session", content=typed_seed(session_id="\\ud800"), headers=JSON)
    assert answered.status_code == 422, answered.text
    assert (await counter_http.get("/health")).json()["live_sessions"] == 0


async def test_a_large_invalid_body_is_not_echoed_in_the_422(counter_http: httpx.AsyncClient) -> None:
    big = {"responses_create_params": {"input": "x"}, "response": {"pad": ["y" * 1000] * 5000}}
    answered = await counter_http.post("/verify", json=big)
    assert answered.status_code == 422
    assert len(answered.content) < 20_000, len(answered.content)
    inputs = json.dumps([e.get("input") for e in answered.json()["detail"]])
    assert "y" * 201 not in inputs and "characters)" in inputs


async def test_many_errors_are_capped(counter_http: httpx.AsyncClient) -> None:
    response = make_response()
    response["output"] = [{"type": "function_call"}] * 1000  # each misses name, arguments, call_id
    answered = await counter_http.post(
        "/verify", json={"responses_create_params": {"input": "x"}, "expected_count": 0, "response": response}
    )
    detail = answered.json()["detail"]
    assert answered.status_code == 422 and len(detail) == 51 and detail[-1]["type"] == "too_many_errors"


def test_parse_json_errors_point_at_the_problem() -> None:
    with pytest.raises(json.JSONDecodeError) as caught:
        parse_json(b'{"a": 1,\n "b": nope}')
    assert caught.value.lineno == 2 and caught.value.colno > 1
    assert parse_json(b'{"big": 123456789012345678901234567890, "f": 1.5}') == {
        "big": 123456789012345678901234567890,
        "f": 1.5,
    }


def test_preview_is_small_whatever_the_input() -> None:
    huge = {"k": ["v" * 10_000] * 10_000, **{f"x{i}": i for i in range(100)}}
    shown = json.dumps(preview(huge))
    assert len(shown) < 5000
    assert preview("a\ud800b") == "a?b"
    assert preview([[[[[1]]]]]) == [[["… (list of 1)"]]]


NON_FINITE = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1E+400", b"1" + b"0" * 400 + b".5"]


@pytest.mark.parametrize("number", NON_FINITE, ids=lambda n: n.decode()[:12])
async def test_a_non_finite_number_is_422_on_tools_seed_verify_and_close(
    counter_http: httpx.AsyncClient, number: bytes
) -> None:
    """Before: the parser accepted them and the 422 handler could not serialise them (a 500, which clients retry)."""
    rollout = RolloutClient(counter_http)
    await rollout.call("/seed_session", {"initial_count": 0})
    cookie = {**JSON, "cookie": rollout.cookie or ""}
    bodies = [
        ("/increment_counter", b'{"count": %s}' % number),
        ("/seed_session", b'{"initial_count": %s}' % number),
        ("/seed_session", typed_seed(task_data=f'{{"initial_count": {number.decode()}}}')),
        ("/verify", b'{"responses_create_params": {"input": "x", "temperature": %s}, "expected_count": 0}' % number),
        ("/close_session", b'{"resources_session_id": "a", "episode_id": {"rollout_id": "r", "attempt": %s}}' % number),
    ]
    for path, body in bodies:
        answered = await counter_http.post(path, content=body, headers=cookie)
        assert answered.status_code == 422, (path, answered.text)
        error = answered.json()["detail"][0]
        assert error["type"] == "finite_number" and error["loc"][0] == "body", (path, error)
        assert error["input"] in ("NaN", "Infinity", "-Infinity"), error
    assert (await rollout.call("/get_counter_value")) == {"count": 0}  # nothing reached the environment


async def test_finite_numbers_and_look_alikes_pass(counter_http: httpx.AsyncClient) -> None:
    rollout = RolloutClient(counter_http)
    await rollout.call("/seed_session", {"initial_count": 0})
    for body in (b'{"count": 1e2}', b'{"count": 1, "note": "NaN, Infinity and 1e400 in text"}', b'{"count": 1E-400}'):
        cookie = {**JSON, "cookie": rollout.cookie or ""}
        answered = await counter_http.post("/increment_counter", content=body, headers=cookie)
        assert answered.status_code == 200, answered.text
    assert (await rollout.call("/get_counter_value")) == {"count": 101}  # 1e2 + 1 + 1E-400 (0.0)


def test_a_non_finite_input_in_a_validation_error_is_previewed_as_text() -> None:
    assert preview([float("nan"), float("inf"), -float("inf"), 1.5]) == ["NaN", "Infinity", "-Infinity", 1.5]
