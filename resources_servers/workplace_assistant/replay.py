"""Replaying tool calls exactly as WorkBench's evaluation does (``scoring.py`` compares the states they leave).

Calls come in two shapes:

- WorkBench strings, ``email.delete_email.func(email_id="00000479")``: what WorkBench's dataset holds as ground
  truth and what its agent runner records for a model. WorkBench ``eval``\\ s them; here the plain shape is read
  as data (:func:`call_strings.read_simple_call`: one linear regular expression, Python's own literal decoding)
  and anything else is parsed with :mod:`ast`, bounded (same syntax, same string escapes); nothing is ``eval``\\ ed.
- NeMo Gym function calls, ``{"name": "email_delete_email", "arguments": "<json object>"}``. By default
  (``workbench_strings=True``) each means what WorkBench's runner makes of it: ``name.func(k="v", ...)`` with
  every value formatted by an f-string, then ``eval``: a value holding a ``"`` (or a carriage return) breaks the
  call and ``\\n`` in a value becomes a newline. The values are passed as data (:func:`structured_call`); only
  a value that breaks out of its literal makes the call text be read as (bounded) code. With
  ``workbench_strings=False`` the decoded JSON values are passed to the tool as they are.
  Ground truth and predictions go through the same reading, so identical calls always give identical states.

Before parsing, every line break in a call string becomes the two characters ``\\n``, as WorkBench's scorer
does to every predicted and ground-truth action before ``eval`` (``calculate_metrics``). A raw newline inside a
quoted value is therefore a newline in the value, not the end of an unterminated string literal.

A call that raises (unknown tool, bad syntax, unexpected argument, a value of the wrong kind) is skipped, as
WorkBench's ``try: eval(action) except: continue`` does; a tool's own validation failure returns a message and
changes nothing. Scoring compares the five states with :func:`tables.tables_equal`.

Ground truth is held to a stricter rule than predictions: every ground-truth call must run *and* do what it
says (each write tool returns its success result: "Email sent successfully.", the new id, the plot path ...).
A ground-truth call that raises or is refused (an id absent from the loaded databases, an assignee who is not
on the team) cannot be the right answer; :class:`scoring.Verdict` reports it in ``ground_truth_problems`` so the
caller fails loudly instead of comparing a prediction with an unchanged state. All 690 WorkBench tasks pass
this rule on WorkBench's data.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .bounded_cache import ByteBoundedLRU
from .call_strings import (
    MAX_CODE_CHARS,
    Budget,
    CallTextError,
    decode_literal_body,
    evaluate,
    keyword_name,
    literal_text,
    read_simple_call,
)
from .workspace import WorkBenchData, Workspace

#: WorkBench tool name (``toolkit.function``) → :class:`Workspace` method / NeMo Gym tool name.
TOOL_METHODS: dict[str, str] = {
    f"{toolkit}.{function}": f"{toolkit}_{function}"
    for toolkit, functions in {
        "company_directory": ["find_email_address"],
        "email": [
            "get_email_information_by_id",
            "search_emails",
            "send_email",
            "delete_email",
            "forward_email",
            "reply_email",
        ],
        "calendar": ["get_event_information_by_id", "search_events", "create_event", "delete_event", "update_event"],
        "analytics": [
            "engaged_users_count",
            "get_visitor_information_by_id",
            "traffic_source_count",
            "total_visits_count",
            "create_plot",
            "get_average_session_duration",
        ],
        "project_management": [
            "get_task_information_by_id",
            "search_tasks",
            "create_task",
            "delete_task",
            "update_task",
        ],
        "customer_relationship_manager": ["search_customers", "update_customer", "add_customer", "delete_customer"],
    }.items()
    for function in functions
}
#: NeMo Gym tool name → WorkBench tool name.
DOTTED_NAMES: dict[str, str] = {method: dotted for dotted, method in TOOL_METHODS.items()}

#: The tools with side effects (WorkBench's ``tools_with_side_effects``).
WRITE_TOOLS = frozenset(
    {
        "calendar.create_event",
        "calendar.delete_event",
        "calendar.update_event",
        "email.send_email",
        "email.delete_email",
        "email.forward_email",
        "email.reply_email",
        "analytics.create_plot",
        "project_management.create_task",
        "project_management.delete_task",
        "project_management.update_task",
        "customer_relationship_manager.update_customer",
        "customer_relationship_manager.add_customer",
        "customer_relationship_manager.delete_customer",
    }
)

#: What a write tool returns when it did what it was asked; anything else is one of its refusal messages.
#: The creating tools (not listed) return the new item's id, or for a plot its file path.
WRITE_DONE: dict[str, str] = {
    "email.send_email": "Email sent successfully.",
    "email.delete_email": "Email deleted successfully.",
    "email.forward_email": "Email forwarded successfully.",
    "email.reply_email": "Email replied successfully.",
    "calendar.delete_event": "Event deleted successfully.",
    "calendar.update_event": "Event updated successfully.",
    "project_management.delete_task": "Task deleted successfully.",
    "project_management.update_task": "Task updated successfully.",
    "customer_relationship_manager.update_customer": "Customer updated successfully.",
    "customer_relationship_manager.delete_customer": "Customer deleted successfully.",
}
#: Arguments naming an existing item (a refusal "... not found." means the loaded databases lack it).
ID_ARGUMENTS = frozenset({"email_id", "event_id", "task_id", "customer_id"})


def write_done(dotted: str, result: Any) -> bool:
    """Whether a write tool's ``result`` says it did its job (rather than refusing with a message)."""
    if dotted in WRITE_DONE:
        return bool(result == WRITE_DONE[dotted])
    if dotted == "analytics.create_plot":
        return isinstance(result, str) and result.startswith("plots/")
    return isinstance(result, str) and result.isdigit()  # create_event, create_task, add_customer: the new id


#: Every toolkit: what a live session serves.
ALL_MODULES = frozenset(
    {"calendar", "email", "analytics", "project_management", "customer_relationship_manager", "company_directory"}
)
#: Names WorkBench's scorer module has in scope when it evals an action: the paper's ``src/evals/utils.py``
#: imports all six toolkits, the company directory included (read-only: it never changes a reward, only
#: whether a directory call counts in ``failed_calls``).
EVAL_MODULES = ALL_MODULES


_HEAP_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def error_text(exc: BaseException, *, with_type: bool = True) -> str:
    """What a model or a client reads about a failed call: the error, less any heap address an object's repr
    put in it (``<... object at 0x7fc5...>`` tells about the server's memory, nothing about the call)."""
    text = f"{type(exc).__name__}: {exc}" if with_type else str(exc)
    return _HEAP_ADDRESS.sub("", text)


class ActionError(Exception):
    """A call that WorkBench's replay would skip (it raised)."""


@dataclass(frozen=True)
class ToolCall:
    """A parsed call: the workspace method and its positional and keyword arguments."""

    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dotted(self) -> str:
        return DOTTED_NAMES[self.method]


#: Bytes of parsed call strings kept (ground truth is replayed at every verify); an entry larger than
#: :data:`MAX_CACHED_CALL_BYTES` is not kept. Model-made calls (structured arguments) are never cached.
CACHE_BYTES = 8 * 1024 * 1024
MAX_CACHED_CALL_BYTES = 64 * 1024

_cache: ByteBoundedLRU[tuple[str, bool], ToolCall] = ByteBoundedLRU(CACHE_BYTES, MAX_CACHED_CALL_BYTES)


def parse_workbench_action(action: str, *, live: bool = False) -> ToolCall:
    """Parse ``toolkit.function.func(...)`` the way WorkBench's ``eval`` would run it; ActionError if it would fail.

    By default the scorer's scope applies (:data:`EVAL_MODULES`); ``live=True`` is a session's tool call,
    where every toolkit is available. Parses are cached, in at most :data:`CACHE_BYTES`: a task's ground truth
    is replayed at every verify.
    """
    if not isinstance(action, str):
        raise ActionError(f"an action must be a string, not {type(action).__name__}")
    key = (action, live)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    call = _parse(workbench_source(action), live)  # an error is not cached (nor was it before)
    _cache.put(key, call, sys.getsizeof(action) + _call_bytes(call))
    return call


def _call_bytes(call: ToolCall) -> int:
    """About what a parsed call holds in memory (strings and sequences by their own size; a repeated
    sequence's items are shared references)."""
    return 200 + sum(sys.getsizeof(v) for v in (*call.args, *call.kwargs.values()))


def workbench_source(action: str) -> str:
    """The text WorkBench's scorer hands to ``eval``: each line break replaced by the two characters ``\\n``.

    WorkBench's ``calculate_metrics`` does ``action.replace("\\n", "\\\\n")`` on every predicted and ground-truth
    action before ``eval`` (which then strips leading spaces and tabs). Without this step a send_email whose
    body holds line breaks is a syntax error here and a valid call in WorkBench.
    """
    return action.replace("\n", "\\n").lstrip(" \t")


def _method(module: str, function: str, live: bool) -> str:
    """The workspace method of ``module.function``, or the error ``eval`` would raise for it."""
    dotted = f"{module}.{function}"
    if module not in (ALL_MODULES if live else EVAL_MODULES):
        raise ActionError(f"NameError: name {module!r} is not defined")
    if dotted not in TOOL_METHODS:
        raise ActionError(f"AttributeError: unknown tool {dotted!r}")
    return TOOL_METHODS[dotted]


def _parse(source: str, live: bool) -> ToolCall:
    """A call string as ``eval`` would read it (``source`` after :func:`workbench_source`).

    The plain shape (every WorkBench ground truth) is read as data (:func:`call_strings.read_simple_call`);
    anything else as Python, bounded (:data:`call_strings.MAX_CODE_CHARS` of source,
    :data:`call_strings.MAX_BUILT_CHARS` built).
    """
    try:
        simple = read_simple_call(source)
    except CallTextError as exc:
        raise ActionError(str(exc)) from None
    if simple is not None:
        module, function, values = simple
        return ToolCall(_method(module, function, live), (), MappingProxyType(values))
    return _parse_code(source, live)


def _parse_code(source: str, live: bool) -> ToolCall:
    if len(source) > MAX_CODE_CHARS:
        raise ActionError(
            f'the call is {len(source)} characters of Python (it is not a plain name.func(k="v", ...) call, e.g. '
            f'a " in a value ends its string literal); at most {MAX_CODE_CHARS} are read'
        )
    try:
        with warnings.catch_warnings():  # "invalid escape sequence" is a warning in eval too, never an error
            warnings.simplefilter("ignore")
            tree = ast.parse(source, mode="eval")
            # eval also compiles: the compiler rejects what the parser lets through (a repeated keyword
            # argument). Compiling runs nothing.
            compile(tree, "<action>", "eval", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: a null byte (3.11)
        raise ActionError(f"SyntaxError: {getattr(exc, 'msg', exc)}") from exc
    except (RecursionError, MemoryError) as exc:  # a chain of thousands of terms: the parser's own limit
        raise ActionError(f"{type(exc).__name__}: the call's arguments nest too deeply") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise ActionError("not a function call")
    func = call.func
    if not (
        isinstance(func, ast.Attribute)
        and func.attr == "func"
        and isinstance(func.value, ast.Attribute)
        and isinstance(func.value.value, ast.Name)
    ):
        raise ActionError("expected <toolkit>.<function>.func(...)")
    method = _method(func.value.value.id, func.value.attr, live)
    budget = Budget()  # one for the whole call: all its arguments together build at most MAX_BUILT_CHARS
    try:
        args = []
        for a in call.args:
            if isinstance(a, ast.Starred):
                raise ActionError("starred arguments are not supported")
            args.append(evaluate(a, budget))
        kwargs: dict[str, Any] = {}
        for kw in call.keywords:
            if kw.arg is None:
                raise ActionError("** arguments are not supported")
            kwargs[kw.arg] = evaluate(kw.value, budget)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, OverflowError) as exc:
        raise ActionError(f"{type(exc).__name__}: {exc}") from exc
    return ToolCall(method, tuple(args), MappingProxyType(kwargs))  # shared by the cache: read-only


def structured_call(name: str, arguments: Mapping[str, Any], *, live: bool = False) -> ToolCall:
    """A NeMo Gym function call as WorkBench's runner would run it, with its arguments passed as data.

    WorkBench renders ``name.func(k="v", ...)`` (:func:`render_workbench_action`) and ``eval``\\ s it: each value
    is its text (``f"{v}"``, line breaks as ``\\n``) read as a string literal. When every name is an identifier
    and every value's text stays inside its literal (:func:`call_strings.literal_text`), that is all it is,
    and the values are decoded directly (:func:`call_strings.decode_literal_body`): nothing is rendered or
    parsed. Otherwise (a ``"`` in a value ends its literal, and the rest is read as Python, as ``eval`` reads
    it) the rendered call is parsed, bounded as :func:`_parse` says; such calls are never cached.
    """
    dotted = DOTTED_NAMES.get(name)
    if dotted is not None:
        kwargs: dict[str, Any] = {}
        for key, value in arguments.items():
            name_text = keyword_name(str(key))
            text = f"{value}".replace("\n", "\\n")
            if name_text is None or not literal_text(text):
                break
            if name_text in kwargs:
                raise ActionError(f"SyntaxError: keyword argument repeated: {name_text}")
            try:
                kwargs[name_text] = decode_literal_body(text)
            except CallTextError as exc:
                raise ActionError(str(exc)) from None
        else:
            module, function = dotted.split(".")
            return ToolCall(_method(module, function, live), (), MappingProxyType(kwargs))
    return _parse(workbench_source(render_workbench_action(name, arguments)), live)


def render_workbench_action(name: str, arguments: Mapping[str, Any]) -> str:
    """The string WorkBench's runner records for a model's action: ``name.func(k="v", ...)`` (no escaping)."""
    dotted = DOTTED_NAMES.get(name, name)
    rendered = ", ".join(f'{k}="{v}"' for k, v in arguments.items())
    return f"{dotted}.func({rendered})"


def decode_arguments(arguments: Any) -> dict[str, Any]:
    """A function call's ``arguments`` (JSON object string, or already a dict) as a dict; ActionError otherwise."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if not isinstance(arguments, str):
        raise ActionError(f"arguments must be a JSON object string, not {type(arguments).__name__}")
    try:
        decoded = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ActionError(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(decoded, dict):
        raise ActionError("arguments must be a JSON object")
    return decoded


def to_tool_call(action: Any, *, workbench_strings: bool = True, live: bool = False) -> ToolCall:
    """Any supported call shape → :class:`ToolCall` (ActionError when WorkBench's replay would skip it).

    ``live=True``: a tool call in a session rather than in a replay (see :func:`parse_workbench_action`).
    """
    if isinstance(action, str):
        return parse_workbench_action(action, live=live)
    if isinstance(action, Mapping):
        name, arguments = action.get("name"), action.get("arguments")
    else:  # an object with .name / .arguments, e.g. a Responses FunctionCall
        name, arguments = getattr(action, "name", None), getattr(action, "arguments", None)
    if not isinstance(name, str):
        raise ActionError("a function call needs a name")
    args = decode_arguments(arguments)
    if workbench_strings:
        try:
            return structured_call(name, args, live=live)
        except ActionError as exc:
            quoted = [k for k, v in args.items() if any(c in str(v) for c in '"\r\\')]
            if quoted:
                raise ActionError(
                    f'{exc} (WorkBench runs a call as {DOTTED_NAMES.get(name, name)}.func(name="value", ...): '
                    f"a double quote, a carriage return or a backslash in {', '.join(quoted)} can break it; "
                    "leave them out)"
                ) from exc
            raise
    method = name if name in DOTTED_NAMES else TOOL_METHODS.get(name)
    if method is None:
        raise ActionError(f"unknown tool {name!r}")
    return ToolCall(method, (), args)


def run_call(workspace: Workspace, call: ToolCall) -> Any:
    """Run one parsed call on ``workspace``; whatever the tool raises propagates."""
    return getattr(workspace, call.method)(*call.args, **call.kwargs)


@dataclass
class ReplayResult:
    """A workspace after a replay, which calls were skipped because they raised, and (when checked) refused."""

    workspace: Workspace
    calls: int = 0
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (index, call, error)
    refused: list[tuple[int, str, str]] = field(default_factory=list)  # (index, call, the tool's message)
    missing_ids: list[str] = field(default_factory=list)  # "email_id '00000479'" for each id not found


def replay(
    data: WorkBenchData,
    actions: Iterable[Any],
    *,
    workbench_strings: bool = True,
    run_reads: bool = True,
    check_writes: bool = False,
) -> ReplayResult:
    """Run ``actions`` in order on fresh databases, skipping calls that raise.

    With ``run_reads=False`` read-only tools are parsed but not run: they cannot change a compared state, so
    scoring skips their cost (a read that would raise at run time is then not counted in ``failed``).
    With ``check_writes=True`` (ground truth) a write call whose tool refuses (its result is not
    :func:`write_done`) is recorded in ``refused``, and ids it could not find in ``missing_ids``.
    """
    result = ReplayResult(data.new_workspace())
    for i, action in enumerate(actions):
        result.calls += 1
        try:
            call = to_tool_call(action, workbench_strings=workbench_strings)
            if run_reads or call.dotted in WRITE_TOOLS:
                outcome = run_call(result.workspace, call)
        except Exception as exc:  # noqa: BLE001 - WorkBench skips any call that raises
            result.failed.append((i, _label(action)[:200], error_text(exc)[:300]))
            continue
        if check_writes and call.dotted in WRITE_TOOLS and not write_done(call.dotted, outcome):
            result.refused.append((i, _label(action)[:200], f"the tool answered {str(outcome)[:200]!r}"))
            if isinstance(outcome, str) and outcome.endswith("not found."):
                result.missing_ids += [f"{k} {v!r}" for k, v in _bound(call).items() if k in ID_ARGUMENTS]
    return result


def _bound(call: ToolCall) -> dict[str, Any]:
    """A call's arguments by parameter name (positional ones included)."""
    bound = inspect.signature(getattr(Workspace, call.method)).bind(None, *call.args, **call.kwargs)
    return {k: v for k, v in bound.arguments.items() if k != "self"}


def check_ground_truth(
    data: WorkBenchData, ground_truth: Iterable[Any], *, workbench_strings: bool = True
) -> ReplayResult:
    """Replay a task's ground truth with its write calls checked (see :func:`replay`); no problems when empty."""
    return replay(data, ground_truth, workbench_strings=workbench_strings, run_reads=False, check_writes=True)


def _label(action: Any) -> str:
    if isinstance(action, str):
        return action
    if isinstance(action, Mapping):
        return f"{action.get('name')}({action.get('arguments')})"
    return f"{getattr(action, 'name', None)}({getattr(action, 'arguments', None)})"
