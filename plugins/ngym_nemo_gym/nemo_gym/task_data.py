"""An environment's schema for its dataset rows (NeMo Gym's ``nemo_gym.task_data``).

An environment may declare, in ``<its folder>/task_data.py``, a pydantic model (or union) named ``TaskData`` for
the task-owned fields of its rows. This module loads that schema and validates rows against it:

* Framework keys (``responses_create_params``, ``agent_ref``, ``task_source``, ``_ng_task_index``,
  ``_ng_rollout_index``) are not the task's and are left out.
* Schemas are flat: the contents of a legacy ``verifier_metadata`` dict and of a migrated ``task_data`` dict
  are lifted to the top level first; the same key with two different values is reported as a conflict.
* A field the schema marks ``json_schema_extra={"legacy_location": "verifier_metadata"}`` is one the server
  reads only from inside ``verifier_metadata``: a legacy row carrying it only at the top level is reported as
  misplaced (validation would pass, the server would not see it).
* A materialized task row (``{"task_id": {...}, "task_input": {...}}``) is validated through its
  ``task_input`` (and ``task_input.task_data``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, TypeAdapter

from nemo_gym import _resolve_under_cwd_or_install

TASK_DATA_MODULE_NAME = "task_data"
TASK_DATA_EXPORT_NAME = "TaskData"
LEGACY_METADATA_KEY = "verifier_metadata"
TASK_DATA_ROW_KEY = "task_data"
#: Top-level row keys the framework owns; everything else in a row belongs to the task.
RESERVED_ROW_KEYS = frozenset(
    {"responses_create_params", "agent_ref", "task_source", "_ng_task_index", "_ng_rollout_index"}
)


class TaskDataSchemaError(Exception):
    """An environment's ``task_data.py`` exists but cannot be imported or exports no usable ``TaskData``."""


def is_materialized_task_row(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` has the materialized-task shape (``task_id`` object and ``task_input``), valid or not."""
    return isinstance(row.get("task_id"), Mapping) and "task_input" in row


def find_server_dir(server_name: str, base_folder: str = "resources_servers") -> Path | None:
    """``<base_folder>/<server_name>`` under the working directory or NeMo's root, if it is a folder."""
    candidate = _resolve_under_cwd_or_install(Path(base_folder) / server_name, validator=Path.is_dir)
    return candidate if candidate.is_dir() else None


def load_task_data_schema(server_dir: Path) -> TypeAdapter[Any] | None:
    """A ``TypeAdapter`` for ``<server_dir>/task_data.py``'s ``TaskData``; ``None`` when there is no such file."""
    module_path = server_dir / f"{TASK_DATA_MODULE_NAME}.py"
    if not module_path.is_file():
        return None
    module_name = f"nemo_gym_task_data.{server_dir.name}"
    spec = importlib.util.spec_from_file_location(module_name, module_path)
    if spec is None or spec.loader is None:
        raise TaskDataSchemaError(f"Could not build an import spec for {module_path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before running it: dataclass and typing machinery look it up there
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise TaskDataSchemaError(f"Failed to import {module_path}: {exc}") from exc
    task_data = getattr(module, TASK_DATA_EXPORT_NAME, None)
    if task_data is None:
        raise TaskDataSchemaError(
            f"{module_path} does not export `{TASK_DATA_EXPORT_NAME}`. Export a Pydantic model "
            "(or a TypeAdapter-compatible union alias) under that name."
        )
    try:
        return TypeAdapter(task_data)
    except Exception as exc:
        raise TaskDataSchemaError(
            f"`{TASK_DATA_EXPORT_NAME}` in {module_path} is not TypeAdapter-compatible: {exc}"
        ) from exc


def normalize_task_fields(row: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The task-owned fields of ``row``, flat: framework keys dropped, ``verifier_metadata`` and ``task_data``
    contents lifted to the top level. Returns ``(fields, conflicts)``: the keys found twice with different
    values (the top-level value is kept). A container that is not a dict is passed on for the schema to refuse."""
    fields = {k: v for k, v in row.items() if k not in RESERVED_ROW_KEYS}
    conflicts: list[str] = []
    for container_key in (LEGACY_METADATA_KEY, TASK_DATA_ROW_KEY):
        container = fields.pop(container_key, None)
        if isinstance(container, dict):
            for key, value in container.items():
                if key in fields and fields[key] != value:
                    conflicts.append(key)
                else:
                    fields[key] = value
        elif container is not None:
            fields[container_key] = container
    return fields, conflicts


def legacy_metadata_fields(adapter: TypeAdapter[Any]) -> frozenset[str]:
    """The schema's fields marked ``legacy_location: verifier_metadata``."""

    def models(tp: Any) -> list[type[BaseModel]]:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [tp]
        return [model for arg in get_args(tp) for model in models(arg)]

    return frozenset(
        name
        for model in models(getattr(adapter, "_type", None))
        for name, info in model.model_fields.items()
        if isinstance(info.json_schema_extra, dict)
        and info.json_schema_extra.get("legacy_location") == LEGACY_METADATA_KEY
    )


@dataclass
class TaskDataValidationReport:
    """What validating one dataset file against one environment's schema found."""

    server_name: str
    dataset_fpath: str
    rows: int = 0
    error_rows: int = 0
    errors: list[str] = field(default_factory=list)
    unknown_keys: dict[str, int] = field(default_factory=dict)
    conflicting_keys: dict[str, int] = field(default_factory=dict)
    misplaced_keys: dict[str, int] = field(default_factory=dict)

    MAX_RECORDED_ERRORS = 5

    @property
    def clean(self) -> bool:
        return not (self.error_rows or self.conflicting_keys or self.misplaced_keys or self.unknown_keys)

    def summary(self) -> str:
        parts = [
            f"{self.dataset_fpath}: {self.error_rows}/{self.rows} rows failed task_data validation "
            f"against the `{self.server_name}` schema."
        ]
        parts.extend(f"  row {message}" for message in self.errors)
        if self.error_rows > len(self.errors):
            parts.append(f"  ... and {self.error_rows - len(self.errors)} more rows")

        def listed(counts: dict[str, int]) -> str:
            return ", ".join(f"{key} ({n} rows)" for key, n in sorted(counts.items()))

        if self.conflicting_keys:
            parts.append(
                "  keys with DIFFERENT values top-level vs verifier_metadata (ambiguous): "
                + listed(self.conflicting_keys)
            )
        if self.misplaced_keys:
            parts.append(
                "  keys this server's wire reads from verifier_metadata but found top-level "
                "(the server will not see them): " + listed(self.misplaced_keys)
            )
        if self.unknown_keys:
            parts.append(
                "  keys not declared by the schema (typo, or missing schema field?): " + listed(self.unknown_keys)
            )
        return "\n".join(parts)


def _count(counts: dict[str, int], keys: Iterable[str]) -> None:
    for key, n in Counter(keys).items():
        counts[key] = counts.get(key, 0) + n


class TaskDataValidator:
    """Validates rows against one schema, accumulating a :class:`TaskDataValidationReport`."""

    def __init__(self, server_name: str, adapter: TypeAdapter[Any], dataset_fpath: str) -> None:
        self._adapter = adapter
        self._legacy_fields = legacy_metadata_fields(adapter)
        self.report = TaskDataValidationReport(server_name=server_name, dataset_fpath=dataset_fpath)

    def _error(self, row_index: int, message: str) -> None:
        self.report.error_rows += 1
        if len(self.report.errors) < TaskDataValidationReport.MAX_RECORDED_ERRORS:
            self.report.errors.append(f"{row_index}: {message}")

    def validate_row(self, row_index: int, row: dict[str, Any]) -> None:
        self.report.rows += 1
        migrated = False
        if is_materialized_task_row(row):
            task_input = row.get("task_input")
            if not isinstance(task_input, Mapping):
                self._error(row_index, f"task_input must be an object, got {type(task_input).__name__}")
                return
            task_data = task_input.get("task_data")
            if "task_data" in task_input and not isinstance(task_data, Mapping):
                self._error(row_index, f"task_input.task_data must be an object, got {type(task_data).__name__}")
                return
            migrated = "task_data" in task_input
            row = dict(task_data or {})
            for key, value in task_input.items():
                if key == "task_data":
                    continue
                if key in row and row[key] != value:
                    _count(self.report.conflicting_keys, [key])
                else:
                    row[key] = value
        # Rows already migrated (a task_data key) are exempt: top level inside task_data is the final place.
        if self._legacy_fields and not migrated and TASK_DATA_ROW_KEY not in row:
            nested = row.get(LEGACY_METADATA_KEY)
            nested_keys = set(nested) if isinstance(nested, dict) else set()
            _count(self.report.misplaced_keys, (row.keys() & self._legacy_fields) - nested_keys)
        subject, conflicts = normalize_task_fields(row)
        _count(self.report.conflicting_keys, conflicts)
        try:
            validated = self._adapter.validate_python(subject)
        except Exception as exc:
            self._error(row_index, str(exc).strip().replace("\n", "; ")[:400])
            return
        # With extra="allow", undeclared inputs land in __pydantic_extra__ (for a union, the chosen member's).
        if isinstance(validated, BaseModel):
            _count(self.report.unknown_keys, getattr(validated, "__pydantic_extra__", None) or {})


def validate_jsonl_rows(
    server_name: str, adapter: TypeAdapter[Any], dataset_fpath: str, lines: Iterable[str]
) -> TaskDataValidationReport:
    """Validate JSONL lines (blank lines skipped) against one schema."""
    validator = TaskDataValidator(server_name=server_name, adapter=adapter, dataset_fpath=dataset_fpath)
    for index, line in enumerate(lines):
        if line.strip():
            validator.validate_row(index, json.loads(line))
    return validator.report
