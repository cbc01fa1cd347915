"""WorkBench's record tools, defined once by a table: get a field by ID, delete, update, search by columns.

Email, calendar, project management and CRM each hold records with an ID column, and their WorkBench tools
(``get_*_information_by_id``, ``delete_*``, ``update_*``, the column searches) differ only in the table, the
noun of their messages and their update rules. ``RECORD_KINDS`` holds those differences; the functions here are
the one body of each tool, with WorkBench's exact messages and order of checks (an argument of the wrong kind
raises where WorkBench's pandas code raises, which the caller turns into an error output or a skipped call).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from .bounded_regex import BoundedPattern
from .tables import Table, is_missing

TASK_LISTS = ["Backlog", "In Progress", "In Review", "Completed"]
TASK_BOARDS = ["Back end", "Front end", "Design"]
CUSTOMER_STATUSES = ["Qualified", "Won", "Lost", "Lead", "Proposal"]
PRODUCT_INTERESTS = ["Software", "Hardware", "Services", "Consulting", "Training"]

BAD_LIST = "List not valid. Please choose from: 'Backlog', 'In Progress', 'In Review', 'Completed'."
BAD_BOARD = "Board not valid. Please choose from: 'Back end', 'Front end', 'Design'."
BAD_ASSIGNEE = "Assignee email not valid. Please choose from the list of team members."


def team_emails(table: Table) -> set[str]:
    """The project's team: every assignee address of the tasks table, lower-cased."""
    return {v.lower() for v in table.values("assigned_to_email") if isinstance(v, str)}


@dataclass(frozen=True)
class FieldRule:
    """An update of ``field`` is refused with ``message`` unless the new value is in ``allowed(table)``."""

    field: str
    allowed: Callable[[Table], Collection[Any]]
    message: str


@dataclass(frozen=True)
class RecordKind:
    """What one toolkit's record tools differ in."""

    attr: str  #: the Workspace attribute holding the table
    id_column: str
    noun: str  #: in the messages: "Email not found.", "Task ID not provided."
    lowercase: tuple[str, ...] = ()  #: fields an update stores lower-cased
    rules: tuple[FieldRule, ...] = ()
    #: the answer to an update of a column the table lacks; None: WorkBench adds the column (NaN elsewhere)
    unknown_field: str | None = None
    #: calendar: the record is looked up before the new value is read (an unknown event is reported first)
    find_first: bool = False


#: The four toolkits with ID'd records, by Workspace attribute.
RECORD_KINDS: dict[str, RecordKind] = {
    kind.attr: kind
    for kind in (
        RecordKind("email", "email_id", "Email"),
        RecordKind("calendar", "event_id", "Event", lowercase=("participant_email",), find_first=True),
        RecordKind(
            "project_management",
            "task_id",
            "Task",
            lowercase=("assigned_to_email",),
            rules=(
                FieldRule("board", lambda _: TASK_BOARDS, BAD_BOARD),
                FieldRule("list_name", lambda _: TASK_LISTS, BAD_LIST),
                FieldRule("assigned_to_email", team_emails, BAD_ASSIGNEE),
            ),
            unknown_field="Field not valid.",
        ),
        RecordKind(
            "customer_relationship_manager",
            "customer_id",
            "Customer",
            lowercase=("customer_email", "assigned_to_email"),
            rules=(
                FieldRule(
                    "status",
                    lambda _: CUSTOMER_STATUSES,
                    "Status not valid. Please choose from: 'Qualified', 'Won', 'Lost', 'Lead', 'Proposal'",
                ),
                FieldRule(
                    "product_interest",
                    lambda _: PRODUCT_INTERESTS,
                    "Product interest not valid. Please choose from: 'Software', 'Hardware', 'Services', "
                    "'Consulting', 'Training'",
                ),
            ),
            unknown_field=(
                "Field not valid. Please choose from: 'customer_name', 'assigned_to_email', 'customer_email', "
                "'customer_phone', 'last_contact_date', 'product_interest', 'status', 'notes', 'follow_up_by'"
            ),
        ),
    )
}


def field_by_id(kind: RecordKind, table: Table, row_id: Any, field: Any) -> Any:
    """``{field: value}`` of the first record whose ID is ``row_id``, or WorkBench's message."""
    if not row_id:
        return f"{kind.noun} ID not provided."
    if not field:
        return "Field not provided."
    found = table.positions_eq(kind.id_column, row_id)
    if not found:
        return f"{kind.noun} not found."
    record = table.records(found[:1])[0]
    if field in record:
        return {field: record[field]}
    return "Field not found."


def delete_by_id(kind: RecordKind, table: Table, row_id: Any) -> str:
    """Delete the records whose ID is ``row_id``; WorkBench's message either way."""
    if not row_id:
        return f"{kind.noun} ID not provided."
    if not table.contains(kind.id_column, row_id):
        return f"{kind.noun} not found."
    table.delete_where_eq(kind.id_column, row_id)
    return f"{kind.noun} deleted successfully."


def update_by_id(kind: RecordKind, table: Table, row_id: Any, field: Any, new_value: Any) -> str:
    """Set ``field`` of the records whose ID is ``row_id``: lower-cased and checked by the kind's rules first
    (after the look-up for ``find_first``); WorkBench's message either way."""
    if not row_id or not field or not new_value:
        return f"{kind.noun} ID, field, or new value not provided."
    if kind.find_first and not table.contains(kind.id_column, row_id):
        return f"{kind.noun} not found."
    if field in kind.lowercase:
        new_value = new_value.lower()
    for rule in kind.rules:
        if field == rule.field and new_value not in rule.allowed(table):
            return rule.message
    if not table.contains(kind.id_column, row_id):
        return f"{kind.noun} not found."
    if kind.unknown_field is not None and not table.has_column(field):
        return kind.unknown_field
    table.set_where_eq(kind.id_column, row_id, field, new_value)
    return f"{kind.noun} updated successfully."


def contains_mask(table: Table, positions: list[int], column: str, pattern: Any, *, case: bool) -> list[int]:
    """Rows whose ``column`` matches regex ``pattern`` (``Series.str.contains(pattern, case=...)``)."""
    regex = BoundedPattern(pattern, ignore_case=not case)
    ci = table.col(column)
    out = []
    for p in positions:
        cell = table.rows[p][ci]
        if not isinstance(cell, str):
            raise ValueError("Cannot mask with non-boolean array containing NA / NaN values")
        if regex.search(cell):
            out.append(p)
    return out


def compare_mask(
    table: Table, positions: list[int], column: str, op: Callable[[Any, Any], bool], other: Any
) -> list[int]:
    """Rows where ``op(cell, other)`` on an object column (missing cells compare False)."""
    ci = table.col(column)
    return [p for p in positions if not is_missing(table.rows[p][ci]) and op(table.rows[p][ci], other)]


def at_least(cell: Any, bound: Any) -> bool:
    return bool(cell >= bound)


def at_most(cell: Any, bound: Any) -> bool:
    return bool(cell <= bound)


def search(
    table: Table,
    patterns: Iterable[tuple[str, Any]],
    bounds: Iterable[tuple[str, Any, Callable[[Any, Any], bool]]] = (),
) -> list[int]:
    """Positions of the records every given filter keeps, in table order: each ``(column, pattern)`` whose
    pattern is given matches case-insensitively (a regex, as WorkBench's ``str.contains``), then each
    ``(column, bound, op)`` whose bound is given holds."""
    positions = list(range(len(table)))
    for column, pattern in patterns:
        if pattern:
            positions = contains_mask(table, positions, column, pattern, case=False)
    for column, bound, op in bounds:
        if bound:
            positions = compare_mask(table, positions, column, op, bound)
    return positions


def next_id(table: Table, column: str) -> int:
    """``int(df[column].max()) + 1`` (string maximum; ValueError on an empty table, like ``int(nan)``)."""
    top = table.max_of(column)
    if isinstance(top, float) and math.isnan(top):
        raise ValueError("cannot convert float NaN to integer")
    return int(top) + 1
