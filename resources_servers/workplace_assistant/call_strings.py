"""WorkBench's call strings read as data, with bounds on what model text can make the server build.

WorkBench records a model's action as ``name.func(k="v", ...)`` (each value pasted into a string literal by an
f-string) and ``eval``\\ s it. The value a tool receives is therefore the value of that string literal. This
module gives the same values without building or parsing code in the common case:

- :func:`decode_literal_body` decodes the text between the quotes of a ``"..."`` literal exactly as CPython's
  parser does (its ``unicode_escape`` step, with the parser's own treatment of non-ASCII text), in linear time;
- :func:`literal_text` says whether a value's text stays inside its literal (no ``"``, no carriage return or
  NUL, no backslash escaping the closing quote), so that the value is just that decoded text;
- :func:`read_simple_call` reads a whole call string of the plain shape ``toolkit.function.func(k="...", ...)``
  (every WorkBench ground truth) with one linear regular expression and the decoder.

Only a call that steps outside that shape (a value whose ``"`` ends its literal, so that the rest of the value
is read as Python, as WorkBench's ``eval`` reads it) goes to :func:`evaluate`, the bounded reader of literals
joined by ``+`` and ``*``: its source is at most :data:`MAX_CODE_CHARS` and everything it builds together at
most :data:`MAX_BUILT_CHARS` characters or items, so one call costs bounded memory and time, however it is
written.
"""

from __future__ import annotations

import ast
import codecs
import keyword
import re
import unicodedata
import warnings
from typing import Any

#: Longest call text read as Python (ast) rather than as data. WorkBench's longest ground-truth call is 668
#: characters; parsing a hostile 1 MB expression costs ~0.8 s of CPU and ~120 MB transiently, 64 KiB ~7 ms.
MAX_CODE_CHARS = 65_536
#: Most characters (or items) that ``+`` and ``*`` in one call may build, all intermediate results counted:
#: bounds memory and time whatever chain of terms a value holds (a chain of n ``+`` costs O(n²) otherwise).
MAX_BUILT_CHARS = 1_000_000


class CallTextError(ValueError):
    """Text that WorkBench's ``eval`` would refuse (a ``SyntaxError`` there), or that exceeds a bound here."""


# A backslash and the ASCII character it escapes (kept as is), a backslash before non-ASCII text or at the end
# (the parser makes it a literal backslash), or a non-ASCII character (the parser writes it as \\U%08x).
_PARSER_PREP = re.compile(r"\\([\x00-\x7f])|(\\)|([^\x00-\x7f])", re.DOTALL)


def _prep(match: re.Match[str]) -> str:
    if match.group(1) is not None:
        return match.group(0)
    if match.group(2) is not None:
        return "\\u005c"
    return f"\\U{ord(match.group(3)):08x}"


def decode_literal_body(body: str) -> str:
    """The value of the Python literal ``"<body>"`` (``body`` must be :func:`literal_text`), without parsing code.

    CPython's parser (``decode_unicode_with_escapes``) copies each backslash with the ASCII character after it,
    turns a backslash before non-ASCII text into an escaped backslash and non-ASCII characters into ``\\U``
    escapes, then decodes with ``unicode_escape``. This does the same. An invalid escape (``\\x4``,
    ``\\N{nope}``, ``\\U00110000``) is a :class:`CallTextError`, as it is a ``SyntaxError`` for ``eval``.
    """
    if "\\" not in body:
        return body  # nothing to decode: the text is the value
    prepared = _PARSER_PREP.sub(_prep, body).encode("ascii")
    try:
        with warnings.catch_warnings():  # an unknown escape ("\\s") is a warning for eval too, never an error
            warnings.simplefilter("ignore")
            return codecs.decode(prepared, "unicode_escape")
    except UnicodeDecodeError as exc:
        raise CallTextError(f"SyntaxError: (unicode error) 'unicodeescape' codec can't decode: {exc.reason}") from None


_OUTSIDE_LITERAL = re.compile(r'["\r\x00\ud800-\udfff]')
_TRAILING_BACKSLASHES = re.compile(r"\\+\Z")


def literal_text(text: str) -> bool:
    """Whether ``"<text>"`` is one string literal: no ``"`` to end it early, no carriage return (a line break to
    the tokenizer) or NUL (refused in source), no lone surrogate (not encodable source), and no odd run of
    backslashes at the end (which would escape the closing quote)."""
    if _OUTSIDE_LITERAL.search(text):
        return False
    trailing = _TRAILING_BACKSLASHES.search(text)
    return trailing is None or len(trailing.group(0)) % 2 == 0


def keyword_name(text: str) -> str | None:
    """The argument name ``text`` is in ``name=...`` source (identifiers are NFKC-normalised), or None when it
    is not an identifier (a keyword, a space, an ``=``: the call would be read differently)."""
    if not text.isidentifier() or keyword.iskeyword(text):
        return None
    name = unicodedata.normalize("NFKC", text) if not text.isascii() else text
    return None if keyword.iskeyword(name) else name


_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_PLAIN = r'[^"\\\r\x00\ud800-\udfff]'
# "Unrolled": runs of plain characters between escapes, so the engine repeats a character class (fast, linear)
# rather than an alternation per character (~1 µs a character: 30 s for a 32 MB body).
_BODY = rf"{_PLAIN}*+(?:\\[^\r\x00\ud800-\udfff]{_PLAIN}*+)*+"
_ARG = rf' *({_IDENT}) *= *"({_BODY})" *'
_SIMPLE_CALL = re.compile(rf"({_IDENT})\.({_IDENT})\.func\(((?:{_ARG},)*(?:{_ARG})?)\)", re.DOTALL)
_ONE_ARG = re.compile(rf"{_ARG},?", re.DOTALL)


def read_simple_call(source: str) -> tuple[str, str, dict[str, str]] | None:
    """``(toolkit, function, {name: value})`` for a call of the plain shape ``toolkit.function.func(k="v", ...)``
    (ASCII names, double-quoted literals, spaces), or None for anything else (read it as code, bounded).

    ``source`` is what ``eval`` would see (line breaks already replaced). A repeated keyword is a
    :class:`CallTextError`, as the compiler refuses it.
    """
    match = _SIMPLE_CALL.fullmatch(source)
    if match is None:
        return None
    toolkit, function, args = match.groups()[:3]
    if keyword.iskeyword(toolkit) or keyword.iskeyword(function):
        return None
    values: dict[str, str] = {}
    for arg in _ONE_ARG.finditer(args):
        name, body = arg.group(1), arg.group(2)
        if keyword.iskeyword(name):
            return None
        if name in values:
            raise CallTextError(f"SyntaxError: keyword argument repeated: {name}")
        values[name] = decode_literal_body(body)
    return toolkit, function, values


class Budget:
    """What one call's ``+`` and ``*`` may still build (characters or items, every intermediate result)."""

    def __init__(self, limit: int = MAX_BUILT_CHARS) -> None:
        self.left = limit

    def charge(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise CallTextError(
                f"the call's arguments would build more than {MAX_BUILT_CHARS} characters or items "
                "(literals joined by + and *); refused"
            )


def _size(value: Any) -> int:
    """What a value costs the budget: its length, or an integer's decimal digits (bounded from its bits)."""
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return value.bit_length() // 3 + 1
    if isinstance(value, str | bytes | list | tuple):
        return len(value)
    return 1


def evaluate(node: ast.AST, budget: Budget) -> Any:
    """An argument expression made of literals and ``+``/``*`` between them, as ``eval`` computes it, with every
    result's size charged to ``budget`` before it is built. Iterative, so a long chain cannot exhaust the stack.
    """
    # Post-order over the expression tree with an explicit stack: (node, visited?).
    stack: list[tuple[ast.AST, bool]] = [(node, False)]
    values: list[Any] = []
    while stack:
        current, visited = stack.pop()
        if isinstance(current, ast.BinOp) and isinstance(current.op, ast.Add | ast.Mult):
            if not visited:
                stack += [(current, True), (current.right, False), (current.left, False)]
                continue
            right, left = values.pop(), values.pop()
            if isinstance(current.op, ast.Add):
                if isinstance(left, int) and isinstance(right, int):
                    budget.charge(max(_size(left), _size(right)) + 1)
                else:
                    budget.charge(_size(left) + _size(right))
                values.append(left + right)
            else:
                budget.charge(_product_size(left, right))
                values.append(left * right)
            continue
        value = _literal(current)
        budget.charge(_size(value))
        values.append(value)
    return values[0]


def _literal(node: ast.AST) -> Any:
    """``ast.literal_eval`` of one operand; its error names the kind of expression, never the node's repr (which
    carries a heap address)."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise CallTextError(
            f"ValueError: only literals (and + or * between them) can be arguments, not {type(node).__name__} "
            f"(column {getattr(node, 'col_offset', 0) + 1})"
        ) from None


def _product_size(left: Any, right: Any) -> int:
    """The size of ``left * right`` before computing it (a repeated sequence, or a product of integers)."""
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, str | bytes | list | tuple) and isinstance(times, int):
            return max(len(seq) * max(times, 0), 1)
    if isinstance(left, int) and isinstance(right, int):
        return _size(left) + _size(right)
    return 1
