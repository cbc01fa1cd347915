"""NeMo Gym's prompt templates: a YAML file with ``user`` (required) and ``system`` (optional) ``{field}`` templates,
filled from a dataset row into ``responses_create_params.input``. A row that already has an input and a prompt
template is a conflict, not a silent override."""

from __future__ import annotations

import functools
from typing import Any

import yaml
from pydantic import BaseModel

from nemo_gym import _resolve_under_cwd_or_install

__all__ = ["PromptConfig", "apply_prompt_to_row", "fill_prompt", "load_prompt_config", "validate_prompt_compatibility"]


class PromptConfig(BaseModel):
    user: str
    system: str | None = None


@functools.lru_cache(maxsize=64)
def load_prompt_config(path: str) -> PromptConfig:
    """The prompt file at ``path`` (relative: under the current directory, else NeMo Gym's root), cached."""
    with open(_resolve_under_cwd_or_install(path), encoding="utf-8") as stream:
        return PromptConfig.model_validate(yaml.safe_load(stream))


def fill_prompt(prompt_config: PromptConfig, row: dict[str, Any]) -> list[dict[str, str]]:
    """The messages of ``prompt_config`` with ``{name}`` filled from the row's top-level fields."""
    templates = [("system", prompt_config.system), ("user", prompt_config.user)]
    try:
        return [{"role": role, "content": text.format_map(row)} for role, text in templates if text is not None]
    except KeyError as exc:
        raise KeyError(
            f"Prompt template references field {exc} but the data row only has fields: {list(row)}"
        ) from None


def validate_prompt_compatibility(rows: list[dict[str, Any]], prompt_config: PromptConfig) -> None:
    """Refuse rows that already carry ``responses_create_params.input`` when a prompt template applies."""
    clashing = [i for i, row in enumerate(rows) if (row.get("responses_create_params") or {}).get("input")]
    if clashing:
        raise ValueError(
            "Some rows have responses_create_params.input but prompt_config is also specified. These are "
            f"mutually exclusive. Use one or the other. Violating rows: {clashing}"
        )


def apply_prompt_to_row(row: dict[str, Any], prompt_config: PromptConfig) -> dict[str, Any]:
    """A copy of ``row`` whose ``responses_create_params.input`` is the filled template (other params kept)."""
    params = row.get("responses_create_params")
    params = dict(params) if isinstance(params, dict) else {}
    params["input"] = fill_prompt(prompt_config, row)
    return {**row, "responses_create_params": params}
