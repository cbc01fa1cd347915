"""WorkBench's data: where it is (``$NGYM_WORKBENCH_DIR``, or the package's own sample in WorkBench's layout) and
the template databases loaded from it once (:class:`WorkBenchData`), from which each rollout's
:class:`~workplace_assistant.workspace.Workspace` is forked."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ngym.errors import ConfigError

from .tables import Table, read_csv_as_strings

if TYPE_CHECKING:
    from .workspace import Workspace

SAMPLE_DIR = Path(__file__).resolve().parent / "sample_data"
DATA_DIR_ENV = "NGYM_WORKBENCH_DIR"
DIRECTORY_FILE = "raw/email_addresses.csv"
PROCESSED_FILES = {
    "calendar_events": "calendar_events.csv",
    "emails": "emails.csv",
    "project_tasks": "project_tasks.csv",
    "customers": "customer_relationship_manager_data.csv",
    "analytics": "analytics_data.csv",
}


def chosen_data_dir(data_dir: str | None = None) -> str | None:
    """The data directory to serve: ``data_dir``, else ``$NGYM_WORKBENCH_DIR``; None means the bundled sample."""
    return data_dir or os.environ.get(DATA_DIR_ENV) or None


def data_dir_problem(root: str | Path) -> str | None:
    """Why ``root`` is not a WorkBench-format data directory (None when it is)."""
    if not Path(root).is_dir():
        return f"not a directory: {root}"
    needed = [f"processed/{name}" for name in PROCESSED_FILES.values()] + [DIRECTORY_FILE]
    missing = [rel for rel in needed if not (Path(root) / rel).is_file()]
    if missing:
        return f"not a WorkBench data directory: {root} (missing {', '.join(missing)})"
    return None


@dataclass(frozen=True)
class WorkBenchData:
    """The template databases, loaded once and never mutated."""

    calendar_events: Table
    emails: Table
    project_tasks: Table
    customers: Table
    analytics: Table
    directory: tuple[str, ...]
    source: str

    @classmethod
    def from_dir(cls, root: str | Path) -> WorkBenchData:
        """Load WorkBench's layout: ``<root>/processed/*.csv`` and ``<root>/raw/email_addresses.csv``.

        Raises :class:`ngym.errors.ConfigError` naming the missing files when ``root`` is not such a directory.
        """
        root = Path(root)
        problem = data_dir_problem(root)
        if problem:
            raise ConfigError(problem)
        processed = root / "processed"
        tables = {key: read_csv_as_strings(processed / name) for key, name in PROCESSED_FILES.items()}
        analytics = tables["analytics"]
        ui = analytics.col("user_engaged")
        analytics.rows = [r[:ui] + (r[ui] == "True",) + r[ui + 1 :] for r in analytics.rows]
        directory = read_csv_as_strings(root / DIRECTORY_FILE, header=False, names=["email_address"])
        return cls(
            calendar_events=tables["calendar_events"],
            emails=tables["emails"],
            project_tasks=tables["project_tasks"],
            customers=tables["customers"],
            analytics=analytics,
            directory=tuple(directory.values("email_address")),
            source=str(root),
        )

    @classmethod
    def sample(cls) -> WorkBenchData:
        """The small sample databases shipped with the package (original content, WorkBench's format)."""
        return cls.from_dir(SAMPLE_DIR)

    @classmethod
    def resolve(cls, data_dir: str | None = None) -> WorkBenchData:
        """``data_dir``, else ``$NGYM_WORKBENCH_DIR``, else the bundled sample."""
        chosen = chosen_data_dir(data_dir)
        return cls.from_dir(chosen) if chosen else cls.sample()

    @property
    def is_sample(self) -> bool:
        """Whether these are the bundled sample databases rather than WorkBench's own data."""
        return Path(self.source) == SAMPLE_DIR

    def new_workspace(self) -> Workspace:
        """A fresh, independent set of databases (copy-on-write; costs microseconds)."""
        from .workspace import Workspace  # the tools are built on the data: imported when first asked for

        return Workspace(self)
