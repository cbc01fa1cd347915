"""What ``ngym install openenv:...`` learnt about one OpenEnv environment, kept beside its generated module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

#: How tools are offered: ``mcp`` (each of the environment's MCP tools is a route) or ``step`` (one ``/step``).
ToolMode = Literal["mcp", "step"]


class ToolSpec(BaseModel):
    """One MCP tool of the environment, as its ``list_tools`` answered at install."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)


class Manifest(BaseModel):
    """An installed OpenEnv environment: where its server comes from, its tools, and its reward rule."""

    name: str = Field(description="The ngym environment name.")
    source: str = Field(description="What was installed: a distribution, a folder or a URL.")
    domain: str
    description: str = ""
    # Where the OpenEnv server runs: a URL (served elsewhere), or started by ngym from python + app (+ app_dir).
    url: str | None = None
    python: str | None = Field(default=None, description="The interpreter of the environment's own virtualenv.")
    app: str | None = Field(default=None, description="The ASGI app OpenEnv's create_app built, as module:attribute.")
    app_dir: str | None = Field(default=None, description="Put on sys.path first (a folder's `server.app:app`).")
    env: dict[str, str] = Field(default_factory=dict, description="Environment variables for the OpenEnv server.")
    required_env: dict[str, str] = Field(
        default_factory=dict, description="Variables its server cannot start without (found in its code), and what."
    )
    tool_mode: ToolMode = "step"
    tools: list[ToolSpec] = Field(default_factory=list)
    action_schema: dict[str, Any] = Field(default_factory=dict)
    observation_schema: dict[str, Any] = Field(default_factory=dict)
    supports_concurrent_sessions: bool | None = None
    requires_single_thread_executor: bool | None = None
    max_concurrent_envs: int | None = None
    reward_rule: str = "last"
    openenv_version: str | None = None
    #: written as the generated distribution's ``data/example.jsonl`` and ``data/example_rollouts.jsonl``
    #: (dataset rows; recorded rollouts: row + ``response`` + ``reward``), made at install: ngym_openenv.examples
    example_rows: list[dict[str, Any]] = Field(default_factory=list)
    example_rollouts: list[dict[str, Any]] = Field(default_factory=list)
    examples_note: str = Field(default="", description="How the examples were made, or why there is none.")

    def save(self, path: Path) -> None:
        # the examples live in the data files beside it (project.write_example_data), not twice
        dumped = self.model_dump_json(indent=2, exclude={"example_rows", "example_rollouts"})
        path.write_text(dumped + "\n", encoding="utf-8")


def load_manifest(path: Path | str) -> Manifest:
    """Read a manifest written by ``ngym install openenv:...``."""
    return Manifest.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
