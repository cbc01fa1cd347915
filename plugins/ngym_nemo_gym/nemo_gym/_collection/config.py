"""The options of a rollout collection, with NeMo Gym 0.7.0's field names, defaults and validation.

``RolloutCollectionConfig`` is what ``gym eval run --no-serve`` takes (``input_jsonl_fpath`` → rollouts),
``RolloutAggregationConfig`` what ``gym eval aggregate`` takes (rollout shards → one metrics file). Drivers such as
GDPVal's multi-stage orchestrator read and copy these (``model_copy(update=...)``, ``model_fields_set``), so they
are pydantic models with NeMo's fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from nemo_gym._collection.records import NG_FAILURE_CLASS_KEY, NG_NO_PERSIST_KEY, rollout_key
from nemo_gym.path_utils import materialized_path_for
from ngym import ConfigError


def _check_names(value: Any) -> list[str]:
    """Health-check ids as a list: NeMo's CLI also passes them comma-separated."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    return sorted({str(item).strip() for item in value if str(item).strip()})


class SharedRolloutCollectionConfig(BaseModel):
    """The options every rollout collection takes (NeMo's field names and defaults)."""

    upload_rollouts: bool = True
    output_jsonl_fpath: str
    require_complete: bool = False
    num_samples_in_parallel: int | None = Field(default=None, gt=0)
    max_resident_rollout_tasks: int | None = Field(default=None, ge=1)
    retain_results_in_memory: bool = True
    responses_create_params: dict[str, Any] = Field(default_factory=dict)
    disable_aggregation: bool = False
    disable_health_check: bool = False
    health_check_workers: int | None = Field(default=None, ge=1)
    health_check_ignored_checks: list[str] = Field(default_factory=list)
    count_failure_classes_as_zero: list[str] = Field(default_factory=list)
    count_missing_rollouts_as_zero: bool = False
    route_failures_to_sidecar: bool = False
    rollout_collection_driver: str | None = None
    environment_routing_mode: Literal["agent", "legacy", "taskset"] = "agent"
    environment_server_name: str | None = None
    environment_server_routes: dict[str, str] = Field(default_factory=dict)

    @field_validator("health_check_ignored_checks", mode="before")
    @classmethod
    def _ignored_checks(cls, value: Any) -> list[str]:
        return _check_names(value)

    @model_validator(mode="before")
    @classmethod
    def _deprecated_upload_name(cls, data: Any) -> Any:
        # NeMo's older name for upload_rollouts; an explicit upload_rollouts wins.
        if isinstance(data, Mapping) and "upload_rollouts_to_wandb" in data:
            data = dict(data)
            data.setdefault("upload_rollouts", data.pop("upload_rollouts_to_wandb"))
        return data

    @model_validator(mode="after")
    def validate_environment_routing(self) -> SharedRolloutCollectionConfig:
        if self.environment_routing_mode == "legacy" and self.environment_server_name is None:
            raise ValueError("environment_server_name is required when environment_routing_mode=legacy")
        if self.environment_routing_mode == "taskset" and not self.environment_server_routes:
            raise ValueError("environment_server_routes are required when environment_routing_mode=taskset")
        return self

    def check_completion(self, *, expected: int, results: list[dict[str, Any]]) -> None:
        """With ``require_complete``, fail a run that completed fewer than ``expected`` distinct rollouts
        (failures and unpersisted results do not count); its partial artifacts stay where they were written."""
        if not self.require_complete:
            return
        completed = len(
            {
                (r.get("stage_index"), *rollout_key(r))
                for r in results
                if r.get(NG_FAILURE_CLASS_KEY) is None and not r.get(NG_NO_PERSIST_KEY)
            }
        )
        if completed < expected:
            raise RuntimeError(
                f"EVAL FAILED: {completed}/{expected} samples completed. "
                f"Partial artifacts retained at {self.output_jsonl_fpath}."
            )


class SkillsConfig(BaseModel):
    """Run-level skills (``skills.path``): a directory of Agent Skills. Accepted for NeMo's shape; see
    :class:`RolloutCollectionConfig` for what ngym does with it."""

    path: str


class RolloutCollectionConfig(SharedRolloutCollectionConfig):
    """One batch of rollouts from ``input_jsonl_fpath`` (NeMo's ``gym eval run --no-serve``).

    Every row is routed to an agent (``agent_name``, ``agent_map``, its own ``agent_ref``), repeated
    ``num_repeats`` times, and sent to ``/run`` of the environment server in front of that agent (the agent itself
    when no environment server fronts it). Results go to ``output_jsonl_fpath``, failures to its
    ``_failures.jsonl`` sidecar, the rows as sent to ``_materialized_inputs.jsonl``, the environment's
    ``/aggregate_metrics`` answer to ``_aggregate_metrics.json``.
    """

    agent_name: str | None = None
    agent_map: dict[str, str] | None = None
    fan_out: dict[str, list[str]] | None = None
    input_jsonl_fpath: str
    limit: int | None = None
    num_repeats: int | dict[str, int] = 1
    num_repeats_add_seed: bool = False
    interleave_repeats: bool = False
    resume_from_cache: bool = False
    prompt_config: str | None = None
    skills: SkillsConfig | None = None
    dispatch_budget_s: float | None = Field(default=None, ge=0)
    drain_margin_s: float | None = Field(default=None, ge=0)
    dispatch_longest_first: bool = False
    retry_terminal_timeouts: bool = False
    retry_invalid_judge_responses: bool = False

    @field_validator("num_repeats", mode="before")
    @classmethod
    def _null_repeats_means_one(cls, value: Any) -> Any:
        return 1 if value is None else value

    @model_validator(mode="after")
    def _agent_name_is_the_default_route(self) -> RolloutCollectionConfig:
        # agent_name is shorthand for agent_map._default: fold it in so routing reads one field.
        if self.agent_name is None:
            return self
        default = (self.agent_map or {}).get("_default")
        if default is not None and default != self.agent_name:
            raise ValueError(
                f"agent_name={self.agent_name!r} conflicts with agent_map._default={default!r}. Set only one of them."
            )
        self.agent_map = {**(self.agent_map or {}), "_default": self.agent_name}
        return self

    @model_validator(mode="after")
    def _repeats_are_positive(self) -> RolloutCollectionConfig:
        counts = {"num_repeats": self.num_repeats} if isinstance(self.num_repeats, int) else self.num_repeats
        below = {name: count for name, count in counts.items() if count < 1}
        if below:
            raise ValueError(f"num_repeats must be >= 1, got {below}")
        return self

    @model_validator(mode="after")
    def _budget_needs_bounded_dispatch(self) -> RolloutCollectionConfig:
        if self.dispatch_budget_s is not None and self.num_samples_in_parallel is None:
            raise ValueError(
                "dispatch_budget_s requires a finite positive num_samples_in_parallel; "
                "unbounded dispatch can POST the entire queue before the budget is re-checked"
            )
        return self

    @model_validator(mode="after")
    def _fan_out_lists_distinct_agents(self) -> RolloutCollectionConfig:
        for key, agents in (self.fan_out or {}).items():
            if not agents:
                raise ValueError(f"fan_out[{key!r}] is empty: every matching row would be dropped; list an agent")
            repeated = sorted({agent for agent in agents if agents.count(agent) > 1})
            if repeated:
                raise ValueError(
                    f"fan_out[{key!r}] lists {repeated} more than once; use num_repeats to repeat rollouts"
                )
        return self

    @property
    def materialized_jsonl_fpath(self) -> Path:
        return materialized_path_for(Path(self.output_jsonl_fpath))

    def refuse_unsupported(self) -> None:
        """Options of NeMo's collector ngym's does not carry out, refused rather than silently ignored."""
        if self.skills is not None:
            raise ConfigError(
                "skills: run-level Agent Skills are not supported by ngym's rollout collection; "
                "put the skills in the agent's own config"
            )


class RolloutAggregationConfig(BaseModel):
    """Aggregate metrics over rollout shards (NeMo's ``gym eval aggregate``): every file ``input_glob`` matches
    (comma-separated globs allowed), optionally merged into ``output_jsonl_fpath``."""

    input_glob: str
    output_jsonl_fpath: str
    merge_shards: bool = True
    count_failure_classes_as_zero: list[str] = Field(default_factory=list)
    count_missing_rollouts_as_zero: bool = False
    disable_health_check: bool = False
    health_check_workers: int | None = Field(default=None, ge=1)
    health_check_ignored_checks: list[str] = Field(default_factory=list)

    @field_validator("health_check_ignored_checks", mode="before")
    @classmethod
    def _ignored_checks(cls, value: Any) -> list[str]:
        return _check_names(value)
