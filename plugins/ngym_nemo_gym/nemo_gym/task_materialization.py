"""A flat dataset row as an environment-neutral task (NeMo Gym's ``nemo_gym.task_materialization``).

Episode-style servers receive ``{"task_id": {"taskset", "task_id"}, "task_input": {...}}`` rather than a
dataset row; this is the one conversion from the row shape NeMo Gym's datasets use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nemo_gym.episode_types import TaskId
from nemo_gym.global_config import AGENT_REF_KEY_NAME, SKILLS_REF_KEY_NAME, TASK_INDEX_KEY_NAME, TASK_SOURCE_KEY_NAME

#: Row fields that route a rollout (which agent, which source, which skills) rather than describe the task.
_ROUTING_KEYS = frozenset({AGENT_REF_KEY_NAME, TASK_SOURCE_KEY_NAME, SKILLS_REF_KEY_NAME})
#: Fields a row may carry its own id in, first one present wins.
_ID_KEYS = ("task_id", "problem_id", "instance_id")


def materialize_task(row: Mapping[str, Any], *, taskset: str, task_index: int | None = None) -> dict[str, Any]:
    """``row`` as ``{"task_id": TaskId, "task_input": fields}`` (JSON-ready).

    The task id is the row's own (``task_id``, ``problem_id`` or ``instance_id``), else its position: the
    row's ``_ng_task_index``, else ``task_index``. ``task_input`` is the row without routing fields and without
    the collector's ``_ng_*`` bookkeeping. A row that is already a task is refused (converting twice would nest it).
    """
    if "task_input" in row or isinstance(row.get("task_id"), Mapping):
        raise ValueError("Expected a flat dataset row, not an already materialized task")
    task_id = next((str(row[key]) for key in _ID_KEYS if row.get(key) is not None), None)
    if task_id is None:
        index = row.get(TASK_INDEX_KEY_NAME, task_index)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ValueError("A flat row without a task ID requires a non-negative task_index")
        task_id = str(index)
    return {
        "task_id": TaskId(taskset=taskset, task_id=task_id).model_dump(mode="json"),
        "task_input": {k: v for k, v in row.items() if k not in _ROUTING_KEYS and not k.startswith("_ng_")},
    }
