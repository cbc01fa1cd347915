"""A model's regular expression, matched with bounded time and memory.

WorkBench's searches (``Series.str.contains``) and its company directory treat the model's query as a Python
regular expression. Python's ``re`` has no time limit and holds the GIL while it matches, so one pattern with
nested quantifiers (``([a-z.@]+)+!``) against a 27-character address stalled the whole server for minutes; and
``re.compile`` keeps its last 512 patterns, each as large as the model made it. Here the pattern is compiled by
the ``regex`` package (``re``'s syntax and matching in its VERSION0 mode) without caching, at most
:data:`MAX_PATTERN_CHARS` long, and every search of one tool call shares a budget of :data:`PATTERN_SECONDS`.

A query WorkBench's ``re`` would refuse as invalid is refused here too in all but a few syntaxes only ``regex``
knows (``\\p{L}``, ``(?|...)``); a search over its budget is an error the model reads. Only read tools search,
so neither can change a reward.
"""

from __future__ import annotations

import re
import time

import regex

#: Longest pattern compiled (a model's search text; WorkBench's queries are a few words).
MAX_PATTERN_CHARS = 10_000
#: Time one pattern may spend matching, over all the rows one tool call searches.
PATTERN_SECONDS = 0.25


class PatternError(ValueError):
    """A pattern that is invalid, too long, or too slow to match."""


class BoundedPattern:
    """``BoundedPattern(text, ignore_case=...).search(cell)``: ``re.search`` semantics, bounded."""

    def __init__(self, pattern: str, *, ignore_case: bool = False, seconds: float = PATTERN_SECONDS) -> None:
        if not isinstance(pattern, str):
            raise TypeError(f"first argument must be string or compiled pattern, not {type(pattern).__name__}")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise PatternError(f"a search text of {len(pattern)} characters is too long (at most {MAX_PATTERN_CHARS})")
        flags = regex.VERSION0 | (regex.IGNORECASE if ignore_case else 0)
        try:
            self._pattern = regex.compile(pattern, flags, cache_pattern=False)
        except (regex.error, RecursionError, OverflowError) as exc:
            raise re.error(str(exc)) from None
        self.seconds = seconds
        self._deadline = time.monotonic() + seconds

    def search(self, text: str) -> bool:
        left = self._deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return self._pattern.search(text, timeout=left) is not None
        except TimeoutError:
            raise PatternError(
                f"the search text, read as a regular expression, took more than {self.seconds} s to match; "
                "use plain words"
            ) from None
