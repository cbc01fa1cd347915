"""Tool arguments are data: what a model's text can make the server build is bounded, and the values are still
exactly the ones WorkBench's ``eval`` of its call string gives.

Before, a 342-byte tool call (``"x" + "y"*1000000 + ...``, 20 terms) built a 20 MB string, kept in a
4,096-entry cache (ten distinct calls: +220 MB RSS), and 60 terms cost 0.7 s of CPU.
"""

from __future__ import annotations

import ast
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from workplace_assistant import replay
from workplace_assistant.call_strings import (
    MAX_BUILT_CHARS,
    CallTextError,
    decode_literal_body,
    literal_text,
    read_simple_call,
)
from workplace_assistant.replay import (
    ActionError,
    _parse_code,
    parse_workbench_action,
    render_workbench_action,
    structured_call,
    to_tool_call,
    workbench_source,
)

SEARCH = "email_search_emails"


def chain(prefix: str, terms: int, times: int = 1_000_000) -> str:
    """The probe's query: its ``"`` ends the literal, then ``+ "y"*times`` repeated ``terms`` times."""
    return f'{prefix}"' + f' + "y"*{times}' * terms + ' + "'


def test_a_chain_of_repeats_in_a_tool_argument_is_refused_before_it_is_built() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ActionError, match="would build more than"):
            to_tool_call({"name": SEARCH, "arguments": {"query": chain("x0", 20)}}, live=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_BUILT_CHARS  # was 20 MB for this one call; the budget stops it at the second term


def test_a_long_chain_of_small_terms_is_bounded_too() -> None:
    # 60 terms of 20,000: each + copies the whole string so far (quadratic); every intermediate is charged
    with pytest.raises(ActionError, match="would build more than"):
        to_tool_call({"name": SEARCH, "arguments": {"query": chain("x", 60, 20_000)}}, live=True)
    small = to_tool_call({"name": SEARCH, "arguments": {"query": chain("x", 3, 10)}}, live=True)
    assert small.kwargs["query"] == "x" + "y" * 30  # what eval gives, within the bound


def test_integers_cannot_grow_without_bound() -> None:
    product = 'x", subject=' + "*".join(["999999999999"] * 400_00) + ', body="'
    with pytest.raises(ActionError):  # too long to read as Python, or over the budget: never a huge int
        to_tool_call({"name": "email_send_email", "arguments": {"recipient": product}}, live=True)
    product = 'x", subject=' + "*".join(["999999999999"] * 800) + ', body="'
    with pytest.raises(ActionError, match="would build more than"):
        to_tool_call({"name": "email_send_email", "arguments": {"recipient": product}}, live=True)


def test_deep_chains_are_a_failed_call_not_a_crash() -> None:
    deep = 'x"' + ' + "y"' * 15_000 + ' + "'
    with pytest.raises(ActionError):
        to_tool_call({"name": SEARCH, "arguments": {"query": deep}}, live=True)


def test_model_calls_are_not_cached_and_call_strings_are_cached_in_bounded_bytes() -> None:
    replay._cache.clear()
    for i in range(50):
        to_tool_call({"name": SEARCH, "arguments": {"query": f"q{i}" + "z" * 10_000}}, live=True)
        with pytest.raises(ActionError):
            to_tool_call({"name": SEARCH, "arguments": {"query": chain(f"x{i}", 20)}}, live=True)
    assert len(replay._cache) == 0  # structured arguments never reach the call-string cache
    for i in range(400):  # call strings (ground truth): 400 × ~40 KB would be 16 MB in an entry-counted cache
        parse_workbench_action(f'email.search_emails.func(query="{i}{"w" * 20_000}")')
        parse_workbench_action(f'email.search_emails.func(query="{i}{"w" * 100_000}")')  # too big to keep
    assert 0 < replay._cache.bytes == sum(replay._cache.sizes()) <= replay.CACHE_BYTES
    assert max(replay._cache.sizes()) <= replay.MAX_CACHED_CALL_BYTES
    small = 'email.delete_email.func(email_id="00000479")'
    assert parse_workbench_action(small) is parse_workbench_action(small)  # a ground truth is parsed once


def test_long_plain_values_are_read_as_data_with_no_length_limit() -> None:
    body = "line one\nline two \\t tab " + "é" * 200_000
    call = to_tool_call({"name": "email_send_email", "arguments": {"recipient": "a@b.io", "body": body}})
    assert call.kwargs["body"] == "line one\nline two \t tab " + "é" * 200_000
    text = f'email.send_email.func(recipient="a@b.io", subject="s", body="{"b" * 500_000}")'
    assert parse_workbench_action(text).kwargs["body"] == "b" * 500_000


def test_code_the_size_bound_refuses_is_a_readable_failed_call() -> None:
    huge = 'x" + "' + "y" * 100_000 + '" + "'
    with pytest.raises(ActionError, match="characters of Python"):
        to_tool_call({"name": SEARCH, "arguments": {"query": huge}}, live=True)


def test_a_hostile_call_through_the_server_is_a_readable_200_and_memory_stays_flat() -> None:
    from fastapi.testclient import TestClient
    from workplace_assistant.app import WorkplaceAssistantResourcesServer

    from ngym.testing import app_for_class

    with TestClient(app_for_class(WorkplaceAssistantResourcesServer, name="workplace_assistant")) as client:
        assert client.post("/seed_session", json={}).status_code == 200
        tracemalloc.start()
        try:
            for i in range(10):
                answer = client.post(f"/{SEARCH}", json={"query": chain(f"x{i}", 20)})
                assert answer.status_code == 200
                assert "would build more than" in answer.json()["output"]
            retained, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert retained < 5_000_000  # was +200 MB for these ten calls, kept by the cache


# --- fidelity: the data path gives exactly what eval of WorkBench's call string gives ------------------------

ALPHABET = st.sampled_from(list("abN{}uxU0123789\\\"'\n\r\t \x00é€東\U0001f600,=()+*") + ["\\N{BULLET}", "\\u00e9"])
TEXT = st.lists(ALPHABET, max_size=12).map("".join)


def literal_eval_body(body: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(f'"{body}"')


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(TEXT)
def test_literal_decoding_is_pythons(text: str) -> None:
    body = text.replace("\n", "\\n")
    if not literal_text(body):
        return
    try:
        expected: Any = literal_eval_body(body)
    except SyntaxError:
        with pytest.raises(CallTextError):
            decode_literal_body(body)
        return
    assert decode_literal_body(body) == expected


def old_reading(name: str, arguments: dict[str, Any]) -> Any:
    """The call read as code (the bounded ast reader, as before): what WorkBench's eval gives."""
    try:
        call = _parse_code(workbench_source(render_workbench_action(name, arguments)), True)
    except ActionError:
        return "error"
    return call.method, call.args, dict(call.kwargs)


KEYS = st.sampled_from(["query", "date_min", "date_max", "body", "if", "a b", "ｑuery", "é", "x=1, query"])
VALUES = TEXT | st.integers() | st.booleans() | st.none() | st.lists(TEXT, max_size=2)


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(KEYS, VALUES, max_size=3))
def test_structured_arguments_read_as_data_equal_the_call_string_read_as_code(arguments: dict[str, Any]) -> None:
    try:
        call = structured_call(SEARCH, arguments, live=True)
        got: Any = (call.method, call.args, dict(call.kwargs))
    except ActionError:
        got = "error"
    assert got == old_reading(SEARCH, arguments)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(["recipient", "subject", "body", "if"]), TEXT, max_size=3))
def test_call_strings_read_as_data_equal_the_call_string_read_as_code(arguments: dict[str, str]) -> None:
    source = workbench_source(render_workbench_action("email_send_email", arguments))
    try:
        simple = read_simple_call(source)
    except CallTextError:
        simple = "error"
    if simple is None:
        return  # not the plain shape: read as code
    expected = old_reading("email_send_email", arguments)
    assert (simple if simple == "error" else ("email_send_email", (), simple[2])) == expected


def test_plain_call_strings_take_the_data_path_and_others_are_read_as_small_code() -> None:
    plain = 'email.send_email.func(recipient="a@b.io", subject="Hi", body="one\ntwo")'
    values = {"recipient": "a@b.io", "subject": "Hi", "body": "one\ntwo"}
    assert read_simple_call(workbench_source(plain)) == ("email", "send_email", values)
    quoted = 'calendar.update_event.func(event_id=\'00000013\', field="duration", new_value="30")'
    assert read_simple_call(workbench_source(quoted)) is None  # single quotes: not the plain shape
    assert parse_workbench_action(quoted).kwargs["event_id"] == "00000013"


def test_errors_carry_no_heap_addresses() -> None:
    with pytest.raises(ActionError) as caught:
        to_tool_call({"name": SEARCH, "arguments": {"query": 'x" + str(13) + "'}}, live=True)
    assert " at 0x" not in str(caught.value)
    assert "Call" in str(caught.value)  # says what was not a literal


async def test_tool_output_and_verify_errors_carry_no_heap_addresses() -> None:
    from workplace_assistant.app import WorkplaceAssistantResourcesServer
    from workplace_assistant.workspace import SAMPLE_DIR

    from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process

    app = app_for_class(WorkplaceAssistantResourcesServer, name="workplace_assistant", data_dir=str(SAMPLE_DIR))
    code = 'x" + str(13) + "'
    async with serve_in_process(app) as http:
        rollout = RolloutClient(http)
        await rollout.call("/seed_session", {})
        output = (await rollout.call(f"/{SEARCH}", {"query": code}))["output"]
        assert output.startswith("Error executing tool") and " at 0x" not in output
        truth = ["email.search_emails.func(query=str(13))", "email.delete_email.func(email_id=[x for x in y])"]
        response = make_response(calls=[(SEARCH, {"query": code})])
        verified = await rollout.call("/verify", {"responses_create_params": {"input": "x"}, "ground_truth": truth,
                                                  "response": response})  # fmt: skip
    texts = verified["ground_truth_errors"] + verified["failed_call_errors"] + [verified["failure_reason"]]
    assert len(verified["ground_truth_errors"]) == 2 and verified["mask_sample"] is True
    assert all(" at 0x" not in text for text in texts), texts  # was "<ast.Call object at 0x7fc5...>"


def test_a_query_of_one_word_repeated_costs_one_search_per_email(tmp_path: Path) -> None:
    """A query of 1,000,000 repeats of one word was 1,000,000 substring searches per email: ~20 s of CPU on the
    event loop with 600 emails. A generous CPU budget (not wall time) stops the test if that comes back."""
    import shutil
    import signal

    from workplace_assistant.workspace import SAMPLE_DIR, WorkBenchData

    shutil.copytree(SAMPLE_DIR, tmp_path / "data")
    emails = tmp_path / "data" / "processed" / "emails.csv"
    header, *rows = emails.read_text().splitlines(keepends=True)
    emails.write_text(header + "".join(rows * (600 // len(rows) + 1)))  # WorkBench's size: 500 and more
    workspace = WorkBenchData.from_dir(tmp_path / "data").new_workspace()
    expected = workspace.email_search_emails(query="@")  # in every email (its address)

    def over_budget(*_: object) -> None:
        raise TimeoutError("search_emails used more than 4 s of CPU")

    previous = signal.signal(signal.SIGPROF, over_budget)
    signal.setitimer(signal.ITIMER_PROF, 4.0)
    try:
        assert workspace.email_search_emails(query="@ " * 1_000_000) == expected
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
