"""Turn WorkBench's ``queries_and_answers/*.csv`` into NeMo Gym dataset rows (JSONL).

Each row: ``responses_create_params`` (a system message with WorkBench's date, time and meeting-hours rule, the
user query, all 27 tool schemas), ``ground_truth`` as ``[{"name": "<toolkit>_<function>", "arguments": "<json>"}]``,
``category`` (``workplace_assistant_<domain>``) and ``environment_name``.

Ground-truth argument values are the values WorkBench's ``eval`` of the call gives (``\\n`` in a call string is a
newline in the value), so a row means the same to ngym and to NeMo Gym, which passes them to the tool as they
are. The importer checks, for every call, that replaying the row the way ngym replays calls (rendered as
WorkBench renders a model's action) gives exactly the call string's values; only a value that rendering would
break (one holding a ``"``) keeps the text of the call string instead (``\\"``).

Usage::

    python -m workplace_assistant.importer --data-dir /path/to/WorkBench/data --output workbench.jsonl
"""

from __future__ import annotations

import argparse
import ast
import csv
import inspect
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from ngym.errors import ConfigError, NgymError

from .replay import ActionError, parse_workbench_action, render_workbench_action
from .task_domains import DOMAINS
from .tools import tool_schemas
from .workspace import NOW, SAMPLE_DIR, Workspace, chosen_data_dir

ENVIRONMENT_NAME = "workplace_assistant"
SYSTEM_PROMPT = (
    f"Today's date is {NOW.strftime('%A')}, {NOW.date()} and the current time is {NOW.time()}. "
    "Remember the current date and time when answering queries. "
    "Meetings must not start before 9am or end after 6pm."
)


class TaskImportError(ValueError):
    """A WorkBench task that cannot be turned into a row faithfully."""


def _raw_literal(action: str, node: ast.expr) -> str | None:
    """The characters between the quotes of a plain one-part string literal, or None."""
    segment = ast.get_source_segment(action, node)
    if not segment or segment[:1] not in "\"'" or segment[:3] in ('"""', "'''"):
        return None
    quote = segment[0]
    inner = segment[1:-1]
    if not segment.endswith(quote) or quote in inner.replace("\\" + quote, ""):
        return None
    return inner


def ground_truth_call(action: str) -> dict[str, str]:
    """One WorkBench call string → ``{"name", "arguments"}`` whose replay reproduces the call exactly."""
    parsed = parse_workbench_action(action)
    call = ast.parse(action.lstrip(" \t"), mode="eval").body
    assert isinstance(call, ast.Call)
    params = [p for p in inspect.signature(getattr(Workspace, parsed.method)).parameters if p != "self"]
    if len(parsed.args) > len(params):
        raise TaskImportError(f"too many positional arguments: {action}")
    nodes = dict(zip(params, call.args, strict=False)) | {kw.arg: kw.value for kw in call.keywords if kw.arg}
    values = dict(zip(params, parsed.args, strict=False)) | dict(parsed.kwargs)
    raw_form: dict[str, Any] = {}
    for name, value in values.items():
        raw = _raw_literal(action, nodes[name]) if isinstance(value, str) else None
        raw_form[name] = raw if raw is not None else value
    for arguments in (values, raw_form):
        try:
            again = parse_workbench_action(render_workbench_action(parsed.method, arguments))
        except ActionError:
            continue
        if dict(again.kwargs) == values:
            return {"name": parsed.method, "arguments": json.dumps(arguments)}
    raise TaskImportError(f"cannot represent {action!r} as a function call that replays identically")


def _domain(path: Path, domains_field: str) -> str:
    prefix = path.name.replace("_queries_and_answers.csv", "")
    if prefix in DOMAINS:
        return prefix
    try:
        listed = ast.literal_eval(domains_field) if domains_field else []
    except (ValueError, SyntaxError):
        listed = []
    return listed[0] if len(listed) == 1 else "multi_domain"


def task_row(query: str, answer: list[str], domain: str) -> dict[str, Any]:
    """One NeMo Gym dataset row."""
    return {
        "responses_create_params": {
            "input": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": query}],
            "tools": tool_schemas(),
            "parallel_tool_calls": False,
        },
        "ground_truth": [ground_truth_call(a) for a in answer],
        "category": f"workplace_assistant_{domain}",
        "environment_name": ENVIRONMENT_NAME,
    }


def iter_rows(data_dir: str | Path, domains: set[str] | None = None) -> Iterator[dict[str, Any]]:
    """Rows for every task in ``<data_dir>/processed/queries_and_answers/*.csv`` (sorted by file name).

    Raises :class:`ngym.errors.ConfigError` at once (not on first iteration) when there is no such file.
    """
    folder = Path(data_dir) / "processed" / "queries_and_answers"
    files = sorted(folder.glob("*.csv"))
    if not files:
        raise ConfigError(f"no WorkBench tasks: {folder} has no *.csv (is {data_dir} WorkBench's data directory?)")
    return _rows(files, domains)


def _rows(files: list[Path], domains: set[str] | None) -> Iterator[dict[str, Any]]:
    for path in files:
        with open(path, newline="", encoding="utf-8") as fh:
            for record in csv.DictReader(fh):
                domain = _domain(path, record.get("domains", ""))
                if domains and domain not in domains:
                    continue
                yield task_row(record["query"], ast.literal_eval(record["answer"]), domain)


def write_jsonl(rows: Iterator[dict[str, Any]], output: str | Path | None) -> int:
    """Write rows as JSONL to ``output`` (stdout when None); returns how many.

    A file is written whole or not at all: rows go to ``<output>.tmp``, renamed when every row was written.
    """
    if not output:
        return _write(rows, sys.stdout)
    target = Path(output)
    partial = target.with_name(target.name + ".tmp")
    try:
        with open(partial, "w", encoding="utf-8") as out:
            count = _write(rows, out)
        partial.replace(target)
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return count


def _write(rows: Iterator[dict[str, Any]], out: TextIO) -> int:
    count = 0
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workplace_assistant.importer", description="WorkBench queries_and_answers → NeMo Gym JSONL"
    )
    parser.add_argument("--data-dir", default=None, help="WorkBench data dir (default: $NGYM_WORKBENCH_DIR or sample)")
    parser.add_argument("--output", "-o", default=None, help="output JSONL file (default: stdout)")
    parser.add_argument("--domain", action="append", choices=DOMAINS, help="only these domains (repeatable)")
    args = parser.parse_args(argv)
    try:
        count = import_tasks(args.data_dir, args.output, set(args.domain) if args.domain else None)
    except (NgymError, TaskImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    print(f"wrote {count} rows", file=sys.stderr)
    return 0


def import_tasks(data_dir: str | None, output: str | Path | None, domains: set[str] | None = None) -> int:
    """Convert the tasks of ``data_dir`` (else ``$NGYM_WORKBENCH_DIR``, else the sample) to JSONL; returns how many."""
    return write_jsonl(iter_rows(chosen_data_dir(data_dir) or SAMPLE_DIR, domains), output)


if __name__ == "__main__":
    raise SystemExit(main())
