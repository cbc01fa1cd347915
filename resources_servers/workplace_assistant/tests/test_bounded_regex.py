"""A model's search text is a regular expression (as in WorkBench): matching is bounded in time, compiling in
size, and nothing is cached; valid patterns match exactly as ``re`` matches them."""

from __future__ import annotations

import re
import signal
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from workplace_assistant.bounded_regex import MAX_PATTERN_CHARS, BoundedPattern, PatternError
from workplace_assistant.workspace import WorkBenchData


def test_a_catastrophic_pattern_is_an_error_within_its_budget() -> None:
    """``re`` takes ~2^60 steps here and holds the GIL throughout: the server stalled. A generous CPU budget (not
    wall time) stops the test instead of hanging it if that comes back."""

    def over_budget(*_: object) -> None:
        raise AssertionError("matching used more than 20 s of CPU")

    previous = signal.signal(signal.SIGPROF, over_budget)
    signal.setitimer(signal.ITIMER_PROF, 20.0)
    try:
        with pytest.raises(PatternError, match="took more than"):
            BoundedPattern("(a|aa)+$").search("a" * 60 + "b")
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def test_long_and_invalid_patterns_are_errors_and_nothing_is_cached() -> None:
    with pytest.raises(PatternError, match="too long"):
        BoundedPattern("x" * (MAX_PATTERN_CHARS + 1))
    with pytest.raises(re.error):
        BoundedPattern("[")
    workspace = WorkBenchData.sample().new_workspace()
    workspace.calendar_search_events(query="warm")
    tracemalloc.start()
    try:
        for i in range(15):  # re.compile kept its last 512 patterns, each as long as the model made it
            assert workspace.calendar_search_events(query=f"never{i}" + "y" * 9000) == "No events found."
        retained, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert retained < 300_000


PIECES = st.sampled_from(["a", "b", "A", ".", "*", "+", "?", "|", "(", ")", "[ab]", "^", "$", "\\w", "\\d", " ", "é"])


@settings(max_examples=800, deadline=None, database=None)
@given(st.lists(PIECES, max_size=8).map("".join), st.text("abAB é1.", max_size=12), st.booleans())
def test_valid_patterns_match_as_re_matches(pattern: str, text: str, ignore_case: bool) -> None:
    try:
        expected = re.compile(pattern, re.IGNORECASE if ignore_case else 0).search(text) is not None
    except re.error:
        return
    assert BoundedPattern(pattern, ignore_case=ignore_case).search(text) == expected


def test_the_tools_answer_a_readable_error() -> None:
    workspace = WorkBenchData.sample().new_workspace()
    with pytest.raises(PatternError):
        workspace.company_directory_find_email_address(name="y" * 20_000)
    assert workspace.calendar_search_events(query="(a|aa)+$") == "No events found."  # fast on these subjects
