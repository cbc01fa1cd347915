"""Boxed-answer extraction and math-verify comparison."""

from __future__ import annotations

import json
import time

import pytest
from math_with_code.answer import answers_match, find_answer, last_boxed
from math_with_code.checker import AnswerChecker


def message(text: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def tool_output(stdout: str, result: str | None = None) -> dict:
    body = {"success": True, "stdout": stdout, "stderr": "", "result": result}
    return {"type": "function_call_output", "call_id": "c", "output": json.dumps(body)}


def test_last_boxed_handles_nesting_escapes_and_unclosed_boxes() -> None:
    assert last_boxed(r"first \boxed{1} then \boxed{\frac{1}{\sqrt{2}}}.") == r"\frac{1}{\sqrt{2}}"
    assert last_boxed(r"\boxed{\{1, 2\}}") == r"\{1, 2\}"
    assert last_boxed(r"\boxed{3} and a broken \boxed{4") == "3"
    assert last_boxed(r"\boxed {x^{2}}") == "x^{2}"
    assert last_boxed(r"\fbox{7}") == "7"
    assert last_boxed("no box here") is None
    assert last_boxed(r"\boxed{}") is None


def test_find_answer_prefers_the_final_assistant_message_then_tool_outputs() -> None:
    output = [tool_output(r"\boxed{1}"), message(r"so \boxed{2}"), message(r"final: \boxed{3}")]
    assert find_answer(output) == ("3", "assistant")
    output = [tool_output(r"\boxed{41}"), tool_output("", r"\boxed{42}"), message("see above")]
    assert find_answer(output) == ("42", "tool")
    assert find_answer([tool_output("nothing"), message("The answer is 2.")]) == (None, None)
    assert find_answer([{"type": "function_call_output", "call_id": "c", "output": r"raw \boxed{5}"}]) == ("5", "tool")


@pytest.mark.parametrize(
    ("extracted", "expected", "equal"),
    [
        (r"\frac{1}{2}", "0.5", True),
        (r"2\sqrt{2}", r"\sqrt{8}", True),
        (r"\sqrt{8}", r"2\sqrt{2}", True),
        ("1060", "1060", True),
        ("8.0", "8", True),
        (r"\dfrac{3}{4}", "3/4", True),
        (r"\{1,2\}", r"\{2, 1\}", True),
        ("720", "120", False),
        (r"\frac{1}{3}", "0.5", False),
        (None, "1", False),
    ],
)
def test_answers_match(extracted: str | None, expected: str, equal: bool) -> None:
    assert answers_match(extracted, expected) is equal


async def test_checker_processes_compare_and_survive_hard_inputs() -> None:
    checker = AnswerChecker(processes=1, timeout_s=1)
    await checker.start()
    try:
        assert await checker.check(r"\frac{1}{2}", "0.5") == (True, None)
        assert await checker.check(None, "0.5") == (False, None)
        started = time.monotonic()
        equal, _ = await checker.check(r"9^{9^{9^{9^{9}}}}", r"8^{8^{8^{8^{8}}}}")
        assert equal is False and time.monotonic() - started < 60
        assert await checker.check(r"2\sqrt{2}", r"\sqrt{8}") == (True, None)
    finally:
        await checker.close()


def _scan_from_each_box(text: str) -> str | None:
    """The former reading (a scan from every box to its closing brace or the end): the reference for the pass."""
    import re

    for match in reversed(list(re.finditer(r"\\(?:boxed|fbox)\s*\{", text))):
        start, depth, i = match.end(), 1, match.end()
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] in "{}":
                depth += 1 if text[i] == "{" else -1
                if depth == 0:
                    content = text[start:i].strip()
                    if content:
                        return content
                    break
            i += 1
    return None


def test_last_boxed_reads_as_a_scan_from_each_box_would() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    pieces = st.sampled_from(["\\boxed{", "\\fbox {", "{", "}", "\\", "\\{", "\\}", "\\\\", "a", " ", "\n", "\\boxed"])

    @settings(max_examples=2000, deadline=None, database=None)
    @given(st.lists(pieces, max_size=14).map("".join))
    def same(text: str) -> None:
        assert last_boxed(text) == _scan_from_each_box(text)

    same()


def test_many_unclosed_boxes_cost_linear_time() -> None:
    """Model output of 20,000 unclosed boxes (140 KB): the scan from each box took ~70 s of CPU (quadratic), on the
    event loop. A generous CPU budget (not wall time) stops the test instead of hanging it if that comes back."""
    import resource
    import signal

    def over_budget(*_: object) -> None:
        raise TimeoutError("last_boxed used more than 10 s of CPU")

    previous = signal.signal(signal.SIGPROF, over_budget)
    signal.setitimer(signal.ITIMER_PROF, 10.0)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_utime
        assert last_boxed("\\boxed{" * 20_000 + "\\boxed{42}") == "42"
        assert last_boxed("\\boxed{" * 20_000) is None
        assert resource.getrusage(resource.RUSAGE_SELF).ru_utime - before < 10.0
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_a_deeply_nested_tool_output_is_read_as_text_not_a_crash() -> None:
    # json.loads raised RecursionError on it: /verify answered 500
    deep = "[" * 100_000 + "\\boxed{7}"
    assert find_answer([{"type": "function_call_output", "call_id": "c", "output": deep}]) == ("7", "tool")
