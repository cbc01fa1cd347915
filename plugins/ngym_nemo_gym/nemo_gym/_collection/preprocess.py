"""From input rows to the rows a collection dispatches: routing, repeats, task and rollout indices.

Every input row is routed to an agent (``agent_map[<its agent or task_source>]``, else ``agent_map._default``
(``agent_name``), else its own ``agent_ref``), or to an environment server (a materialized task row, or any flat row
under ``environment_routing_mode=legacy``). ``fan_out`` runs a row once per listed agent. Each copy is repeated
``num_repeats`` times. Identical input lines share a task index (unless the row carries its own
``_ng_task_index``); the repeats of a task are numbered 0, 1, ... in ``_ng_rollout_index``.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Mapping
from itertools import islice
from typing import Any

import orjson
from omegaconf import OmegaConf

from nemo_gym import _resolve_under_cwd_or_install
from nemo_gym._collection.config import RolloutCollectionConfig
from nemo_gym._collection.records import NG_ENVIRONMENT_SERVER_KEY
from nemo_gym.global_config import (
    AGENT_REF_KEY_NAME,
    RESPONSES_CREATE_PARAMS_KEY_NAME,
    ROLLOUT_INDEX_KEY_NAME,
    TASK_INDEX_KEY_NAME,
    TASK_SOURCE_KEY_NAME,
)
from nemo_gym.prompt import apply_prompt_to_row, load_prompt_config, validate_prompt_compatibility
from ngym import ConfigError

#: one input row: its position, its line as read (identical lines are one task), the parsed row
RawRow = tuple[int, str, dict[str, Any]]


def materialized_taskset(row: Mapping[str, Any]) -> str | None:
    """The taskset a materialized task row (``task_id.taskset`` + ``task_input``) names; ``None`` for a flat row."""
    task_id = row.get("task_id")
    if not isinstance(task_id, Mapping) or "task_input" not in row:
        return None
    taskset = task_id.get("taskset")
    return taskset if isinstance(taskset, str) and taskset else None


def environment_server_of(row: Mapping[str, Any], config: RolloutCollectionConfig) -> str | None:
    """The environment server a row is sent to, or ``None`` when it goes by its agent.

    A materialized task always goes by its taskset's route; a flat row follows ``environment_routing_mode``
    (``agent``: by its agent; ``legacy``: to ``environment_server_name``; ``taskset``: refused).
    """
    taskset = materialized_taskset(row)
    if taskset is not None:
        if taskset not in config.environment_server_routes:
            raise ValueError(f"No environment server route is configured for taskset {taskset!r}")
        return config.environment_server_routes[taskset]
    if config.environment_routing_mode == "agent":
        return None
    if config.environment_routing_mode == "legacy":
        return config.environment_server_name
    raise ValueError(
        "taskset routing requires rows containing task_id.taskset and task_input; "
        "use environment_routing_mode=agent to mix materialized and flat rows in one batch"
    )


def read_input_rows(config: RolloutCollectionConfig) -> list[dict[str, Any]]:
    """The dispatchable rows of ``config.input_jsonl_fpath`` (``limit``, ``prompt_config`` applied)."""
    path = _resolve_under_cwd_or_install(config.input_jsonl_fpath)
    if not path.exists():
        raise ConfigError(f"Input file not found: '{config.input_jsonl_fpath}' (--input). Check the path.")
    raw_rows: list[RawRow] = []
    with path.open() as handle:
        lines = islice(handle, config.limit) if config.limit else handle
        for number, line in enumerate(lines, 1):
            try:
                raw_rows.append((number - 1, line, orjson.loads(line)))
            except orjson.JSONDecodeError as exc:
                raise ConfigError(f"{path}: line {number} is not JSON ({exc})") from None
    if config.prompt_config:
        prompt = load_prompt_config(config.prompt_config)
        validate_prompt_compatibility([row for _, _, row in raw_rows], prompt)
        raw_rows = [(index, line, apply_prompt_to_row(row, prompt)) for index, line, row in raw_rows]
    return expand_rows(raw_rows, config)


def expand_rows(raw_rows: list[RawRow], config: RolloutCollectionConfig) -> list[dict[str, Any]]:
    """Route, index and repeat ``raw_rows`` as ``config`` says (see the module docstring)."""
    overrides = _resolved(config.responses_create_params)
    repeats = _Repeats(config.num_repeats)
    task_of_line: dict[str, int] = {}
    next_rollout: Counter[int] = Counter()
    unrouted: list[int] = []
    remapped: set[tuple[str, str]] = set()
    rows: list[dict[str, Any]] = []
    for row_index, line, row in raw_rows:
        taskset = materialized_taskset(row)
        server = environment_server_of(row, config)
        agent = (row.get(AGENT_REF_KEY_NAME) or {}).get("name")
        source = row.get(TASK_SOURCE_KEY_NAME)
        basis = (taskset or source or server) if server is not None else (agent if agent is not None else source)
        if server is None and config.agent_map:
            mapped = next(
                (config.agent_map[k] for k in (agent, source) if k is not None and k in config.agent_map), None
            )
            mapped = mapped if mapped is not None else config.agent_map.get("_default")
            if mapped is not None:
                if agent is not None and agent != mapped:
                    remapped.add((agent, mapped))
                agent = mapped
                row[AGENT_REF_KEY_NAME] = {"name": agent}

        if server is not None:
            targets: list[str | None] = [None]
        elif config.fan_out and basis in config.fan_out:
            targets = list(config.fan_out[basis])
        elif agent is not None:
            targets = [agent]
        elif source is not None:
            targets = [None]  # resolved from task_source at dispatch
        else:
            unrouted.append(row_index)
            continue

        if taskset is not None:
            _refuse_for_materialized(overrides, config)
        else:
            row[RESPONSES_CREATE_PARAMS_KEY_NAME] = {**(row.get(RESPONSES_CREATE_PARAMS_KEY_NAME) or {}), **overrides}
        if TASK_INDEX_KEY_NAME not in row:  # a caller's own index (a sharded run's global one) is kept
            row[TASK_INDEX_KEY_NAME] = task_of_line.setdefault(line, len(task_of_line))
        if server is not None:
            row[NG_ENVIRONMENT_SERVER_KEY] = server

        for target in targets:
            count = repeats.of(target, basis)
            for _ in range(count or 0):
                copy = dict(row)
                if target is not None and (copy.get(AGENT_REF_KEY_NAME) or {}).get("name") != target:
                    copy[AGENT_REF_KEY_NAME] = {"name": target}
                task = copy[TASK_INDEX_KEY_NAME]
                copy[ROLLOUT_INDEX_KEY_NAME] = next_rollout[task]
                next_rollout[task] += 1
                if config.num_repeats_add_seed:
                    _add_seed(copy)
                rows.append(copy)

    if remapped:
        warnings.warn(
            f"agent_map overrode agent_ref values already present in the data: {sorted(remapped)}", stacklevel=2
        )
    if unrouted:
        raise ValueError(
            f"No agent specified for rows {unrouted}. Provide agent_name (or agent_map with a _default entry), "
            "or include agent_ref or task_source in the data."
        )
    repeats.check()
    if config.interleave_repeats:
        rows.sort(key=lambda r: r[ROLLOUT_INDEX_KEY_NAME])  # stable: each round keeps the input order
    return rows


class _Repeats:
    """``num_repeats`` as an int, or per routing key (dispatched agent first, then the row's own key, then
    ``_default``); rows no key covers are collected and reported together."""

    def __init__(self, num_repeats: int | dict[str, int]) -> None:
        self.fixed = num_repeats if isinstance(num_repeats, int) else None
        per_key = {} if isinstance(num_repeats, int) else dict(num_repeats)
        self.default = per_key.pop("_default", None)
        self.per_key = per_key
        self.seen: set[str] = set()
        self.uncovered: set[str] = set()

    def of(self, target: str | None, basis: str | None) -> int | None:
        keys = [k for k in dict.fromkeys((target, basis)) if k is not None]
        self.seen.update(keys)
        if self.fixed is not None:
            return self.fixed
        matched = next((k for k in keys if k in self.per_key), None)
        if matched is not None:
            return self.per_key[matched]
        if self.default is None:
            self.uncovered.add(" / ".join(keys))
        return self.default

    def check(self) -> None:
        if self.uncovered:
            raise ValueError(
                f"num_repeats dict has no entry for routing keys {sorted(self.uncovered)} and no '_default' "
                f"fallback. Listed keys: {sorted(self.per_key)}"
            )
        unknown = set(self.per_key) - self.seen
        if unknown:
            warnings.warn(f"num_repeats names agents no input row routes to (a typo?): {sorted(unknown)}", stacklevel=3)


def _resolved(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with OmegaConf's interpolations (``${...}``) resolved."""
    if not params:
        return {}
    resolved = OmegaConf.to_container(OmegaConf.create(params), resolve=True)
    assert isinstance(resolved, dict)  # a mapping stays one
    return {str(key): value for key, value in resolved.items()}


def _refuse_for_materialized(overrides: Mapping[str, Any], config: RolloutCollectionConfig) -> None:
    # A materialized task keeps its parameters inside task_input, which collection does not rewrite.
    if overrides:
        raise ValueError("responses_create_params overrides are not supported for materialized task rows")
    if config.num_repeats_add_seed:
        raise ValueError("num_repeats_add_seed is not supported for materialized task rows")


def _add_seed(row: dict[str, Any]) -> None:
    """A per-repeat ``seed`` in ``metadata.extra_body`` (a JSON string, as vLLM model servers read it)."""
    params = dict(row.get(RESPONSES_CREATE_PARAMS_KEY_NAME) or {})
    metadata = dict(params.get("metadata") or {})
    extra_body = json.loads(metadata.get("extra_body") or "{}")
    extra_body["seed"] = row[ROLLOUT_INDEX_KEY_NAME]
    metadata["extra_body"] = json.dumps(extra_body)
    params["metadata"] = metadata
    row[RESPONSES_CREATE_PARAMS_KEY_NAME] = params
