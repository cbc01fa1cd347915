"""What the ORS front answers about one task row, computed once: its tools, prompt and seed body, as bytes.

A session's ``/prompt``, ``/messages`` and ``/task_tools``, its ``/seed_session`` body and the row half of its
``/verify`` body depend on its row alone. For the rows of the environment's splits (``/create`` by split and
index: every rollout of a training run) they are kept per environment, so the protocol's per-session requests
cost a lookup; a row sent whole (``task_spec``) gets its own, computed when first asked for.
"""

from __future__ import annotations

from typing import Any

import pydantic_core

from ngym.server.fronts.inprocess import response_json, with_raw
from ngym.server.fronts.ors import tasks, wire
from ngym.server.fronts.ors.tools import Toolbox, ToolSpec


class RowFacts:
    """One row and what is answered about it (each computed on first use)."""

    __slots__ = ("_listing", "_messages", "_prompt", "_prompt_text", "_seed", "_tools_json", "row", "toolbox", "tools")

    def __init__(self, row: dict[str, Any], toolbox: Toolbox) -> None:
        self.row = row
        self.toolbox = toolbox
        self.tools: dict[str, ToolSpec] = toolbox.for_row(row)
        self._seed: bytes | None = None
        self._prompt: bytes | None = None
        self._messages: bytes | None = None
        self._listing: bytes | None = None
        self._prompt_text: str | None = None
        self._tools_json: bytes | None = None

    @property
    def seed_body(self) -> bytes:
        """The row as the ``/seed_session`` body."""
        if self._seed is None:
            self._seed = pydantic_core.to_json(self.row)
        return self._seed

    def verify_body(self, response: dict[str, Any]) -> bytes:
        """``{**row, "response": response}`` as JSON, ``response`` (``trajectory.response``'s) with the row's tools
        and ``"status": "completed"`` last; the row's part and its tools encoded once. A row without
        ``responses_create_params`` (a ``task_spec`` of an installed ORS environment) gets an empty one, which
        ``/verify`` requires."""
        if "responses_create_params" not in self.row:
            whole = {**response, "tools": [], "status": "completed"}
            return pydantic_core.to_json({**self.row, "responses_create_params": {"input": []}, "response": whole})
        if "response" in self.row:
            whole = {**response, "tools": self.row["responses_create_params"].get("tools") or [], "status": "completed"}
            return pydantic_core.to_json({**self.row, "response": whole})
        return with_raw(self.seed_body, "response", response_json(response, self.tools_json))

    @property
    def tools_json(self) -> bytes:
        """The row's tools (``responses_create_params.tools``) as JSON: the ``tools`` of its trajectories."""
        if self._tools_json is None:
            params = self.row.get("responses_create_params") or {}
            self._tools_json = pydantic_core.to_json(params.get("tools") or [])
        return self._tools_json

    @property
    def prompt_text(self) -> str:
        """The row's prompt as one text (``tasks.prompt_text``)."""
        if self._prompt_text is None:
            self._prompt_text = tasks.prompt_text(self.row)
        return self._prompt_text

    @property
    def prompt(self) -> bytes:
        """``GET /prompt``'s answer: the prompt as one text block."""
        if self._prompt is None:
            self._prompt = pydantic_core.to_json([wire.text_block(self.prompt_text)])
        return self._prompt

    @property
    def messages(self) -> bytes:
        """``GET /messages``'s answer."""
        if self._messages is None:
            self._messages = pydantic_core.to_json(tasks.prompt_messages(self.row))
        return self._messages

    def told(self, prompt: str) -> None:
        """Answer ``/prompt`` and ``/messages`` with ``prompt``: what the environment's seed answer said, for a row
        that carries no prompt of its own (an installed ORS environment's ``task_spec``)."""
        block = [wire.text_block(prompt)]
        self._prompt = pydantic_core.to_json(block)
        self._messages = pydantic_core.to_json([{"role": "user", "blocks": block}])

    @property
    def listing(self) -> bytes:
        """``GET /task_tools``'s answer: this row's tools and the final-answer tool."""
        if self._listing is None:
            self._listing = pydantic_core.to_json(self.toolbox.listing(self.row))
        return self._listing


class RowTable:
    """The ``RowFacts`` of the split rows asked for so far, by (split, index): at most one per row on disk."""

    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox
        self._known: dict[tuple[str, int], RowFacts] = {}

    def of_split(self, split: str, index: int, row: dict[str, Any]) -> RowFacts:
        """The facts of row ``index`` (normalised, non-negative) of ``split``."""
        facts = self._known.get((split, index))
        if facts is None:
            facts = self._known[(split, index)] = RowFacts(row, self.toolbox)
        return facts

    def of_spec(self, row: dict[str, Any]) -> RowFacts:
        """The facts of a row sent whole (not kept)."""
        return RowFacts(row, self.toolbox)
