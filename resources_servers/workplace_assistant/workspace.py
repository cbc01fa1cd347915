"""WorkBench's five databases and its 27 tools, as plain Python with WorkBench's exact observable behaviour.

:class:`WorkBenchData` (``workbench_data.py``) loads the template databases once (from a WorkBench-format
directory, or the package's own sample). :meth:`WorkBenchData.new_workspace` returns a :class:`Workspace`: an
independent, copy-on-write set of databases on which the tools run. Tool methods are named
``<toolkit>_<function>`` and take the same arguments, defaults, validation and messages as WorkBench's tools; like
WorkBench they raise on arguments of the wrong kind
(the caller turns that into an error output, or a skipped call during replay).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .bounded_regex import BoundedPattern
from .records import (
    BAD_ASSIGNEE,
    BAD_BOARD,
    BAD_LIST,
    RECORD_KINDS,
    TASK_BOARDS,
    TASK_LISTS,
    at_least,
    at_most,
    compare_mask,
    contains_mask,
    delete_by_id,
    field_by_id,
    next_id,
    search,
    team_emails,
    update_by_id,
)
from .tables import Row, Table, is_missing
from .workbench_data import DATA_DIR_ENV as DATA_DIR_ENV
from .workbench_data import DIRECTORY_FILE as DIRECTORY_FILE
from .workbench_data import PROCESSED_FILES as PROCESSED_FILES
from .workbench_data import SAMPLE_DIR as SAMPLE_DIR
from .workbench_data import WorkBenchData as WorkBenchData
from .workbench_data import chosen_data_dir as chosen_data_dir
from .workbench_data import data_dir_problem as data_dir_problem

#: WorkBench's clock: Thursday 2023-11-30 00:00:00.
NOW = datetime(2023, 11, 30, 0, 0, 0)

PLOT_VALUES = [
    "total_visits",
    "session_duration_seconds",
    "user_engaged",
    "visits_direct",
    "visits_referral",
    "visits_search_engine",
    "visits_social_media",
]
PLOT_TYPES = ["bar", "line", "scatter", "histogram"]

#: The compared state, in WorkBench's order, and the workspace attribute holding each table.
STATE_TABLES = {
    "calendar_events": "calendar",
    "emails": "email",
    "plots": "analytics",
    "project_tasks": "project_management",
    "customers": "customer_relationship_manager",
}


def _parse_timestamp(value: Any) -> datetime:
    """``pd.Timestamp(value)`` for the inputs that occur: datetimes, ISO-like and free-form date strings."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise TypeError(f"Cannot convert input {value!r} of type {type(value).__name__} to Timestamp")
    text = value.strip()
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    try:
        from dateutil import parser as date_parser  # pandas' own fallback parser
    except ImportError:  # pragma: no cover - dateutil ships with pandas and most environments
        raise ValueError(f"could not convert string to Timestamp: {value!r}") from None
    try:
        return date_parser.parse(text)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"could not convert string to Timestamp: {value!r}") from exc


class Workspace:
    """One rollout's databases plus WorkBench's 27 tools. Not thread-safe; one per session."""

    def __init__(self, data: WorkBenchData) -> None:
        self.data = data
        self.calendar = data.calendar_events.fork()
        self.email = data.emails.fork()
        self.project_management = data.project_tasks.fork()
        self.customer_relationship_manager = data.customers.fork()
        self.analytics = Table(["file_path"], [], [])  # the plots created so far (WorkBench's PLOTS_DATA)
        # WorkBench's get_average_session_duration() with no bounds converts the shared analytics table's
        # durations to float in place; later visitor look-ups then show floats. Tracked, not copied.
        self.durations_are_float = False
        self.base_rows = self.rows()

    def rows(self) -> int:
        """Rows of the five databases now."""
        return sum(len(table) for table in self.state_tables().values())

    def added_rows(self) -> int:
        """Rows this session's calls added (a forward or a reply shares the original's text: a row costs its
        tuple and whatever new text its call sent, which ``max_session_tool_bytes`` bounds)."""
        return self.rows() - self.base_rows

    def release(self) -> None:
        """Drop this workspace's tables (called when its session closes)."""
        empty = Table([], [], [])
        self.calendar = self.email = self.project_management = empty
        self.customer_relationship_manager = self.analytics = empty

    def state_tables(self) -> dict[str, Table]:
        """The five compared tables, keyed by state name."""
        return {name: getattr(self, attr) for name, attr in STATE_TABLES.items()}

    # ------------------------------------------------------------------ company directory
    def company_directory_find_email_address(self, name: Any = "") -> Any:
        if name == "":
            return "Name not provided."
        name = name.lower()
        regex = BoundedPattern(name)
        return [addr for addr in self.data.directory if isinstance(addr, str) and regex.search(addr)]

    # ------------------------------------------------------------------ email
    def email_get_email_information_by_id(self, email_id: Any = None, field: Any = None) -> Any:
        return field_by_id(RECORD_KINDS["email"], self.email, email_id, field)

    def email_search_emails(self, query: Any = "", date_min: Any = None, date_max: Any = None) -> Any:
        # Each distinct word once: "all words appear" means the same, and a query of a million repeats of one
        # word no longer costs a million substring searches per email on the event loop.
        words = list(dict.fromkeys(query.lower().split()))
        t = self.email
        si, bi, ri, di = t.col("subject"), t.col("body"), t.col("sender/recipient"), t.col("sent_datetime")
        matched = []
        for p, r in enumerate(t.rows):
            combined = f"{r[si]} {r[bi]} {r[ri]}".lower()
            if all(w in combined for w in words):
                matched.append(p)
        keys = [t.rows[p][di] for p in matched]
        if len({type(k) for k in keys if not is_missing(k)}) > 1:
            raise TypeError("'<' not supported between instances of 'Timestamp' and 'str'")
        present = [p for p in matched if not is_missing(t.rows[p][di])]
        missing = [p for p in matched if is_missing(t.rows[p][di])]
        ordered = sorted(present, key=lambda p: t.rows[p][di], reverse=True) + missing
        emails = t.records(ordered)
        if date_min:
            low = _parse_timestamp(date_min).date()
            emails = [e for e in emails if _parse_timestamp(e["sent_datetime"]).date() >= low]
        if date_max:
            high = _parse_timestamp(date_max).date()
            emails = [e for e in emails if _parse_timestamp(e["sent_datetime"]).date() <= high]
        if emails:
            return emails[:5]
        return "No emails found."

    def email_send_email(self, recipient: Any = None, subject: Any = None, body: Any = None) -> str:
        if not recipient or not subject or not body:
            return "Recipient, subject, or body not provided."
        if "@" not in recipient or "." not in recipient:
            return "Invalid recipient email address."
        recipient = recipient.lower()
        email_id = str(next_id(self.email, "email_id"))
        # WorkBench writes at label len(table): after a delete this overwrites the row holding that label.
        self.email.set_row_at_label(len(self.email), [email_id, "outbox", recipient, subject, NOW, body])
        return "Email sent successfully."

    def email_delete_email(self, email_id: Any = None) -> str:
        return delete_by_id(RECORD_KINDS["email"], self.email, email_id)

    def email_forward_email(self, email_id: Any = None, recipient: Any = None) -> str:
        if not email_id or not recipient:
            return "Email ID or recipient not provided."
        if not self.email.contains("email_id", email_id):
            return "Email not found."
        if "@" not in recipient or "." not in recipient:
            return "Invalid recipient email address."
        recipient = recipient.lower()
        original = self.email.records(self.email.positions_eq("email_id", email_id)[:1])[0]
        result = self.email_send_email(recipient, f"FW: {original['subject']}", original["body"])
        return "Email forwarded successfully." if result == "Email sent successfully." else result

    def email_reply_email(self, email_id: Any = None, body: Any = None) -> str:
        if not email_id or not body:
            return "Email ID or body not provided."
        if not self.email.contains("email_id", email_id):
            return "Email not found."
        original = self.email.records(self.email.positions_eq("email_id", email_id)[:1])[0]
        result = self.email_send_email(original["sender/recipient"], f"{original['subject']}", body)
        return "Email replied successfully." if result == "Email sent successfully." else result

    # ------------------------------------------------------------------ calendar
    def calendar_get_event_information_by_id(self, event_id: Any = None, field: Any = None) -> Any:
        return field_by_id(RECORD_KINDS["calendar"], self.calendar, event_id, field)

    def calendar_search_events(self, query: Any = "", time_min: Any = None, time_max: Any = None) -> Any:
        t = self.calendar
        everything = list(range(len(t)))
        by_name = set(contains_mask(t, everything, "event_name", query, case=False))
        by_email = set(contains_mask(t, everything, "participant_email", query, case=False))
        events = t.records(p for p in everything if p in by_name or p in by_email)
        if time_min:
            low = _parse_timestamp(time_min)
            events = [e for e in events if _parse_timestamp(e["event_start"]) >= low]
        if time_max:
            high = _parse_timestamp(time_max)
            events = [e for e in events if _parse_timestamp(e["event_start"]) <= high]
        if events:
            return events[:5]
        return "No events found."

    def calendar_create_event(
        self, event_name: Any = None, participant_email: Any = None, event_start: Any = None, duration: Any = None
    ) -> str:
        if not event_name:
            return "Event name not provided."
        if not participant_email:
            return "Participant email not provided."
        if not event_start:
            return "Event start not provided."
        if not duration:
            return "Event duration not provided."
        participant_email = participant_email.lower()
        event_id = str(next_id(self.calendar, "event_id")).zfill(8)
        # pd.concat without ignore_index: the new row keeps its own label, 0.
        self.calendar.concat_row(
            {
                "event_id": event_id,
                "event_name": event_name,
                "participant_email": participant_email,
                "event_start": event_start,
                "duration": duration,
            },
            ignore_index=False,
        )
        return event_id

    def calendar_delete_event(self, event_id: Any = None) -> str:
        return delete_by_id(RECORD_KINDS["calendar"], self.calendar, event_id)

    def calendar_update_event(self, event_id: Any = None, field: Any = None, new_value: Any = None) -> str:
        # Any field name is accepted: an unknown one becomes a new column (NaN elsewhere).
        return update_by_id(RECORD_KINDS["calendar"], self.calendar, event_id, field, new_value)

    # ------------------------------------------------------------------ analytics
    def _visits(self, time_min: Any, time_max: Any) -> list[Row]:
        t = self.data.analytics
        positions = list(range(len(t)))
        if time_min:
            positions = compare_mask(t, positions, "date_of_visit", at_least, time_min)
        if time_max:
            positions = compare_mask(t, positions, "date_of_visit", at_most, time_max)
        return [t.rows[p] for p in positions]

    def _per_day(
        self, rows: list[Row], value: Callable[[Row], float], reduce: Callable[[list[float]], float]
    ) -> dict[str, float]:
        di = self.data.analytics.col("date_of_visit")
        groups: dict[str, list[float]] = {}
        for r in rows:
            if is_missing(r[di]):
                continue  # groupby drops missing keys
            groups.setdefault(r[di], []).append(value(r))
        return {day: reduce(vals) for day, vals in sorted(groups.items())}

    def analytics_get_visitor_information_by_id(self, visitor_id: Any = None) -> Any:
        if not visitor_id:
            return "Visitor ID not provided."
        t = self.data.analytics
        records = t.records(t.positions_eq("visitor_id", visitor_id))
        if not records:
            return "Visitor not found."
        if self.durations_are_float:
            for rec in records:
                rec["session_duration_seconds"] = float(rec["session_duration_seconds"])
        return records

    def analytics_create_plot(
        self, time_min: Any = None, time_max: Any = None, value_to_plot: Any = None, plot_type: Any = None
    ) -> str:
        if not time_min:
            return "Start date not provided."
        if not time_max:
            return "End date not provided."
        if value_to_plot not in PLOT_VALUES:
            return (
                "Value to plot must be one of 'total_visits', 'session_duration_seconds', 'user_engaged', "
                "'direct', 'referral', 'search engine', 'social media'"
            )
        if plot_type not in PLOT_TYPES:
            return "Plot type must be one of 'bar', 'line', 'scatter', or 'histogram'"
        file_path = f"plots/{time_min}_{time_max}_{value_to_plot}_{plot_type}.png"
        self.analytics.set_row_at_label(len(self.analytics), [file_path])
        return file_path

    def analytics_total_visits_count(self, time_min: Any = None, time_max: Any = None) -> dict[str, float]:
        return self._per_day(self._visits(time_min, time_max), lambda r: 1, len)

    def analytics_engaged_users_count(self, time_min: Any = None, time_max: Any = None) -> dict[str, float]:
        ui = self.data.analytics.col("user_engaged")
        return self._per_day(self._visits(time_min, time_max), lambda r: int(bool(r[ui])), sum)

    def analytics_traffic_source_count(
        self, time_min: Any = None, time_max: Any = None, traffic_source: Any = None
    ) -> dict[str, float]:
        rows = self._visits(time_min, time_max)
        if traffic_source:
            si = self.data.analytics.col("traffic_source")
            return self._per_day(rows, lambda r: int(r[si] == traffic_source), sum)
        return self._per_day(rows, lambda r: 1, len)

    def analytics_get_average_session_duration(self, time_min: Any = None, time_max: Any = None) -> dict[str, float]:
        rows = self._visits(time_min, time_max)
        si = self.data.analytics.col("session_duration_seconds")
        result = self._per_day(rows, lambda r: float(r[si]), lambda v: math.fsum(v) / len(v))
        if not time_min and not time_max:
            self.durations_are_float = True
        return result

    # ------------------------------------------------------------------ project management
    def project_management_get_task_information_by_id(self, task_id: Any = None, field: Any = None) -> Any:
        return field_by_id(RECORD_KINDS["project_management"], self.project_management, task_id, field)

    def project_management_search_tasks(
        self,
        task_name: Any = None,
        assigned_to_email: Any = None,
        list_name: Any = None,
        due_date: Any = None,
        board: Any = None,
    ) -> Any:
        criteria = [task_name, assigned_to_email, list_name, due_date, board]
        if not any(criteria):
            return "No search parameters provided."
        t = self.project_management
        patterns = zip(("task_name", "assigned_to_email", "list_name", "due_date", "board"), criteria, strict=True)
        return t.records(search(t, patterns))

    def project_management_create_task(
        self,
        task_name: Any = None,
        assigned_to_email: Any = None,
        list_name: Any = None,
        due_date: Any = None,
        board: Any = None,
    ) -> str:
        t = self.project_management
        if not all([task_name, assigned_to_email, list_name, due_date, board]):
            return "Missing task details."
        assigned_to_email = assigned_to_email.lower()
        if assigned_to_email not in team_emails(t):
            return BAD_ASSIGNEE
        if list_name not in TASK_LISTS:
            return BAD_LIST
        if board not in TASK_BOARDS:
            return BAD_BOARD
        task_id = str(next_id(t, "task_id")).zfill(8)
        t.concat_row(
            {
                "task_id": task_id,
                "task_name": task_name,
                "assigned_to_email": assigned_to_email,
                "list_name": list_name,
                "due_date": due_date,
                "board": board,
            },
            ignore_index=True,
        )
        return task_id

    def project_management_delete_task(self, task_id: Any = None) -> str:
        return delete_by_id(RECORD_KINDS["project_management"], self.project_management, task_id)

    def project_management_update_task(self, task_id: Any = None, field: Any = None, new_value: Any = None) -> str:
        return update_by_id(RECORD_KINDS["project_management"], self.project_management, task_id, field, new_value)

    # ------------------------------------------------------------------ customer relationship manager
    def customer_relationship_manager_search_customers(
        self,
        customer_name: Any = None,
        customer_email: Any = None,
        product_interest: Any = None,
        status: Any = None,
        assigned_to_email: Any = None,
        last_contact_date_min: Any = None,
        last_contact_date_max: Any = None,
        follow_up_by_min: Any = None,
        follow_up_by_max: Any = None,
    ) -> Any:
        filters = [
            customer_name,
            customer_email,
            product_interest,
            status,
            assigned_to_email,
            last_contact_date_min,
            last_contact_date_max,
            follow_up_by_min,
            follow_up_by_max,
        ]
        if not any(filters):
            return "No search parameters provided. Please provide at least one parameter."
        t = self.customer_relationship_manager
        text = ("customer_name", "customer_email", "product_interest", "status", "assigned_to_email")
        bounds = (
            ("last_contact_date", last_contact_date_min, at_least),
            ("last_contact_date", last_contact_date_max, at_most),
            ("follow_up_by", follow_up_by_min, at_least),
            ("follow_up_by", follow_up_by_max, at_most),
        )
        return t.records(search(t, zip(text, filters[:5], strict=True), bounds))[:5]

    def customer_relationship_manager_update_customer(
        self, customer_id: Any = None, field: Any = None, new_value: Any = None
    ) -> str:
        kind = RECORD_KINDS["customer_relationship_manager"]
        return update_by_id(kind, self.customer_relationship_manager, customer_id, field, new_value)

    def customer_relationship_manager_add_customer(
        self,
        customer_name: Any = None,
        assigned_to_email: Any = None,
        status: Any = None,
        customer_email: Any = None,
        customer_phone: Any = None,
        last_contact_date: Any = None,
        product_interest: Any = None,
        notes: Any = "",
        follow_up_by: Any = None,
    ) -> str:
        t = self.customer_relationship_manager
        if not all([customer_name, assigned_to_email, status]):
            return "Please provide all required fields: customer_name, assigned_to_email, status."
        assigned_to_email = assigned_to_email.lower()
        if customer_email:
            customer_email = customer_email.lower()
        new_id = str(next_id(t, "customer_id")).zfill(8)
        t.concat_row(
            {
                "customer_id": new_id,
                "customer_name": customer_name,
                "customer_email": customer_email,
                "customer_phone": customer_phone,
                "last_contact_date": last_contact_date,
                "product_interest": product_interest,
                "status": status,
                "assigned_to_email": assigned_to_email,
                "notes": notes,
                "follow_up_by": follow_up_by,
            },
            ignore_index=True,
        )
        return new_id

    def customer_relationship_manager_delete_customer(self, customer_id: Any = None) -> str:
        kind = RECORD_KINDS["customer_relationship_manager"]
        return delete_by_id(kind, self.customer_relationship_manager, customer_id)
