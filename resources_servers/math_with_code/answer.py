"""Boxed-answer extraction and mathematical comparison (math-verify), all pure functions.

`find_answer(output_items)` picks the answer to grade from a Responses `output` list: the last `\\boxed{...}` of the
last assistant message that has one, else the last one printed by a tool call (its `stdout`/`result`).
`answers_match(extracted, expected)` compares them with math-verify (sympy-based equivalence: `\\frac{1}{2}` equals
`0.5`, `2\\sqrt{2}` equals `\\sqrt{8}`). It uses signal-based time limits, so run it in a main thread: the server
runs it in a separate checker process (checker.py) that it kills when the comparison overruns.
"""

from __future__ import annotations

import json
import re
from typing import Any

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed(text: str) -> str | None:
    """The content of the last complete `\\boxed{...}` (or `\\fbox{...}`) in `text`, nested braces allowed.

    Escaped braces (`\\{`, `\\}`) are content, not grouping. A box whose braces never close is skipped.
    One pass over `text` pairs every brace (linear time: scanning to the end from each unclosed box was
    quadratic, 11 s of CPU for 8,000 of them in 56 KB of model output).
    """
    boxes = list(_BOX.finditer(text))
    if not boxes:
        return None
    closing = _brace_pairs(text, boxes[0].end() - 1)
    for match in reversed(boxes):
        start = match.end()
        end = closing.get(start - 1)
        if end is not None:
            content = text[start:end].strip()
            if content:
                return content
    return None


_BRACE_OR_ESCAPE = re.compile(r"\\.|[{}]", re.DOTALL)


def _brace_pairs(text: str, start: int) -> dict[int, int]:
    """``{position of an opening brace: position of its closing brace}`` from ``start`` on, escapes skipped.

    A box's ``{`` is never escaped (the box pattern puts a letter or a space before it), so from it on this pass
    reads the text as a scan starting just after it would: the pairs are the same.
    """
    pairs: dict[int, int] = {}
    opened: list[int] = []
    for token in _BRACE_OR_ESCAPE.finditer(text, start):
        char = token.group()
        if char == "{":
            opened.append(token.start())
        elif char == "}" and opened:
            pairs[opened.pop()] = token.start()
    return pairs


def _item(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    return dump() if dump else {}


def _message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        part = _item(part)
        if part.get("type") in ("output_text", "text", "input_text") and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "".join(parts)


def _tool_texts(output: Any) -> list[str]:
    """The texts of a function_call_output: the JSON tool response's stdout and result, or the raw string."""
    if not isinstance(output, str):
        return []
    try:
        decoded = json.loads(output)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack (model-made text)
        return [output]
    if isinstance(decoded, dict):
        return [str(decoded[k]) for k in ("result", "stdout") if isinstance(decoded.get(k), str)]
    return [output]


def find_answer(output: list[Any]) -> tuple[str | None, str | None]:
    """(answer, where) from a response's output items; where is "assistant", "tool" or None."""
    items = [_item(i) for i in output]
    for item in reversed(items):
        if item.get("type", "message") == "message" and item.get("role") == "assistant":
            answer = last_boxed(_message_text(item))
            if answer is not None:
                return answer, "assistant"
    for item in reversed(items):
        if item.get("type") == "function_call_output":
            for text in _tool_texts(item.get("output")):
                answer = last_boxed(text)
                if answer is not None:
                    return answer, "tool"
    return None, None


def _has_delimiters(text: str) -> bool:
    return any(d in text for d in ("$", "\\(", "\\[", "\\boxed"))


def answers_match(extracted: str | None, expected: str, timeout_s: int = 5) -> bool:
    """True when `extracted` (the boxed content) is mathematically equal to `expected`, by math-verify.

    Must run in a main thread (math-verify's time limits use SIGALRM).
    """
    if extracted is None:
        return False
    from math_verify import parse, verify

    gold = parse(expected if _has_delimiters(expected) else f"${expected}$", parsing_timeout=timeout_s)
    if not gold:
        gold = parse(expected, parsing_timeout=timeout_s)
    pred = parse(f"\\boxed{{{extracted}}}", parsing_timeout=timeout_s)
    if not pred:
        pred = parse(f"${extracted}$", parsing_timeout=timeout_s)
    if gold and pred and verify(gold, pred, timeout_seconds=timeout_s):
        return True
    return _plain(extracted) == _plain(expected)


def _plain(text: str) -> str:
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    return re.sub(r"\s+|\$|\\[,;!]|\\left|\\right", "", text).strip().lower()
