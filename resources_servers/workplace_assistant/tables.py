"""Copy-on-write tables that behave like WorkBench's pandas DataFrames where rewards depend on it.

A :class:`Table` holds column names, rows (tuples) and row labels (the DataFrame index). Cells are ``str``,
``NAN``/``None`` (missing values, kept apart as pandas keeps them) or any other object (e.g. the timestamp a
sent email gets). Forking a table shares its lists; the first mutation copies them, so a fresh per-session
database costs a few pointers. Rows are immutable tuples shared with the template, which also makes
comparisons cheap (identical rows are skipped without normalising them).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeAlias

#: One row of a table: its cells in column order (strings as read, NaN where missing, whatever a tool wrote).
Row: TypeAlias = tuple[Any, ...]

#: Strings pandas' ``read_csv`` turns into NaN by default (``keep_default_na=True``), even with ``dtype=str``.
PANDAS_NA_STRINGS = frozenset(
    {
        "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
        "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null",
    }
)  # fmt: skip

#: Columns WorkBench's scorer compares case-sensitively.
CASE_SENSITIVE_COLUMNS = frozenset({"status", "list_name", "board"})


#: The missing value pandas puts in a cell (read_csv's NA, concat/reindex fill). One shared object.
NAN = float("nan")


def is_missing(value: Any) -> bool:
    """True for the values pandas treats as missing (None and float NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def read_csv_as_strings(path: str | Path, *, header: bool = True, names: Sequence[str] | None = None) -> Table:
    """Read a CSV the way ``pd.read_csv(path, dtype=str)`` does: every cell a string, pandas' NA strings → NaN."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        rows_in = [r for r in reader if r]  # pandas skips blank lines
    if header:
        columns = list(rows_in[0])
        body = rows_in[1:]
    else:
        columns = list(names or [f"{i}" for i in range(len(rows_in[0]) if rows_in else 0)])
        body = rows_in
    width = len(columns)
    rows: list[Row] = []
    for r in body:
        cells = [NAN if c in PANDAS_NA_STRINGS else c for c in r[:width]]
        cells.extend([NAN] * (width - len(cells)))
        rows.append(tuple(cells))
    return Table(columns, rows, list(range(len(rows))))


class Table:
    """A small, label-aware, copy-on-write table."""

    __slots__ = ("columns", "rows", "labels", "_owned", "_index", "_max")

    def __init__(self, columns: list[str], rows: list[Row], labels: list[int], *, owned: bool = True) -> None:
        self.columns = columns
        self.rows = rows
        self.labels = labels
        self._owned = owned
        self._index = {c: i for i, c in enumerate(columns)}
        self._max: dict[str, Any] = {}  # column maxima of the current rows (shared with forks until they mutate)

    # -- copying ---------------------------------------------------------------------------------------
    def fork(self) -> Table:
        """A table sharing this one's storage; the fork copies it on its first mutation."""
        t = Table.__new__(Table)
        t.columns, t.rows, t.labels, t._index, t._owned = self.columns, self.rows, self.labels, self._index, False
        t._max = self._max
        return t

    def _own(self) -> None:
        self._max = {}  # every caller is about to mutate
        if not self._owned:
            self.rows = list(self.rows)
            self.labels = list(self.labels)
            self.columns = list(self.columns)
            self._index = dict(self._index)
            self._owned = True

    # -- reading ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def col(self, name: str) -> int:
        """Position of a column; KeyError (like pandas) when absent."""
        return self._index[name]

    def has_column(self, name: str) -> bool:
        return name in self._index

    def values(self, name: str) -> Iterator[Any]:
        i = self._index[name]
        return (r[i] for r in self.rows)

    def contains(self, name: str, value: Any) -> bool:
        """``value in df[name].values`` (numpy: any element ``== value``)."""
        i = self._index[name]
        return any(r[i] == value for r in self.rows)

    def positions_eq(self, name: str, value: Any) -> list[int]:
        i = self._index[name]
        return [p for p, r in enumerate(self.rows) if r[i] == value]

    def records(self, positions: Iterable[int] | None = None) -> list[dict[str, Any]]:
        cols = self.columns
        rows = self.rows if positions is None else [self.rows[p] for p in positions]
        return [dict(zip(cols, r, strict=True)) for r in rows]

    def max_of(self, name: str) -> Any:
        """``df[name].max()`` for an object column: missing values skipped; NaN (here: ValueError) when empty."""
        if name not in self._max:
            vals = [v for v in self.values(name) if not is_missing(v)]
            self._max[name] = max(vals) if vals else math.nan
        return self._max[name]

    # -- writing ---------------------------------------------------------------------------------------
    def add_column(self, name: str, fill: Any = NAN) -> None:
        self._own()
        self.columns.append(name)
        self._index[name] = len(self.columns) - 1
        self.rows[:] = [r + (fill,) for r in self.rows]

    def set_where_eq(self, key_col: str, key: Any, col: str, value: Any) -> None:
        """``df.loc[df[key_col] == key, col] = value``.

        When ``col`` is new, pandas 2.1 (WorkBench's pinned version) fills the other rows of the new column with
        the *string* ``"nan"`` if ``value`` is a string (NaN otherwise); so does this.
        """
        positions = self.positions_eq(key_col, key)
        if col not in self._index:
            self.add_column(col, "nan" if isinstance(value, str) else NAN)
        self._own()
        ci = self._index[col]
        for p in positions:
            r = self.rows[p]
            self.rows[p] = r[:ci] + (value,) + r[ci + 1 :]

    def delete_where_eq(self, key_col: str, key: Any) -> None:
        """``df = df[df[key_col] != key]``: keeps the remaining rows' labels."""
        i = self._index[key_col]
        keep = [p for p, r in enumerate(self.rows) if r[i] != key]
        self._own()
        self.rows = [self.rows[p] for p in keep]
        self.labels = [self.labels[p] for p in keep]

    def set_row_at_label(self, label: int, values: Sequence[Any]) -> None:
        """``df.loc[label] = values``: overwrites the rows with that label, or appends one with that label."""
        if len(values) != len(self.columns):
            raise ValueError("cannot set a row with mismatched columns")
        self._own()
        row = tuple(values)
        hit = False
        for p, lab in enumerate(self.labels):
            if lab == label:
                self.rows[p] = row
                hit = True
        if not hit:
            self.rows.append(row)
            self.labels.append(label)

    def concat_row(self, record: dict[str, Any], *, ignore_index: bool) -> None:
        """``pd.concat([df, pd.DataFrame({k: [v]...})], ignore_index=...)``.

        Columns of ``record`` not in the table are appended (filled with NaN above); table columns missing from
        ``record`` are NaN in the new row. The new row gets label 0, or all labels are renumbered 0..n-1.
        """
        self._own()
        for name in record:
            if name not in self._index:
                self.add_column(name)
        self.rows.append(tuple(record.get(c, NAN) for c in self.columns))
        if ignore_index:
            self.labels = list(range(len(self.rows)))
        else:
            self.labels.append(0)


def normalised_cell(column: str, value: Any) -> Any:
    """A cell as WorkBench's scorer sees it after ``df[col].str.lower()``: non-strings become missing (None)."""
    if isinstance(value, str):
        return value if column in CASE_SENSITIVE_COLUMNS else value.lower()
    if column in CASE_SENSITIVE_COLUMNS and not is_missing(value):
        return value
    return None


def tables_equal(a: Table, b: Table) -> bool:
    """``lower(a).equals(lower(b))`` as WorkBench computes it: same columns in order, same labels, same cells.

    Missing values equal each other (pandas' ``array_equivalent`` treats None and NaN as matching).
    """
    if a.rows is b.rows and a.labels is b.labels and a.columns is b.columns:
        return True
    if a.columns != b.columns or a.labels != b.labels or len(a.rows) != len(b.rows):
        return False
    cols = a.columns
    for ra, rb in zip(a.rows, b.rows, strict=True):
        if ra is rb:
            continue
        for c, x, y in zip(cols, ra, rb, strict=True):
            if normalised_cell(c, x) != normalised_cell(c, y):
                return False
    return True
