"""workplace_assistant: the WorkBench benchmark as an ngym resources server.

27 tools over five databases (email, calendar, web analytics, project management, CRM) plus a company
directory. Each rollout gets its own copy-on-write databases at ``/seed_session``. ``/verify`` replays the
response's function calls and the row's ``ground_truth`` on fresh databases and compares the five states the way
WorkBench's scorer does (see ``replay.py`` and docs/workplace_assistant.md); reward 1.0 or 0.0.
"""

from __future__ import annotations

import inspect
import logging
import math
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ngym import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    Domain,
    SimpleResourcesServer,
)

from .replay import error_text, run_call, to_tool_call
from .scoring import score
from .tools import TOOLS, ToolOutput, ToolSpec, request_model
from .truth_check import VERIFIER_ERROR, ReportOnce, problem_reason, truth_problem, warn_about_datasets
from .workspace import DATA_DIR_ENV, WorkBenchData, Workspace, chosen_data_dir, data_dir_problem


class WorkplaceAssistantConfig(BaseResourcesServerConfig):
    data_dir: str | None = Field(
        default=None,
        validate_default=True,  # also checks $NGYM_WORKBENCH_DIR when no data_dir is given
        description="A WorkBench-format data directory (processed/*.csv, raw/email_addresses.csv); "
        "else $NGYM_WORKBENCH_DIR; else the bundled sample databases.",
    )
    workbench_strings: bool = Field(
        default=True,
        description='Run function calls the way WorkBench\'s runner records them (name.func(k="v") strings: '
        "values with a double quote or raw newline break the call, '\\n' becomes a newline). False: use the "
        "decoded JSON arguments as they are.",
    )

    max_session_rows: int = Field(
        default=10_000,
        ge=1,
        description="Rows one session's calls may add to its databases; a write call past it is 413 (reads go on).",
    )

    @field_validator("data_dir")
    @classmethod
    def _data_dir_has_workbench_layout(cls, value: str | None) -> str | None:
        chosen = chosen_data_dir(value)
        problem = data_dir_problem(chosen) if chosen else None
        if problem:
            raise ValueError(problem if value else f"${DATA_DIR_ENV}: {problem}")
        return value


class WorkplaceSeedSessionRequest(BaseSeedSessionRequest):
    model_config = ConfigDict(extra="ignore")

    # Read only to warn early about a ground truth the loaded databases cannot replay (never rejected here).
    ground_truth: Any = None


class WorkplaceVerifyRequest(BaseVerifyRequest):
    ground_truth: list[dict[str, Any] | str] = Field(
        default_factory=list,
        description="The right calls: {name, arguments: JSON string} items, or WorkBench call strings.",
    )
    category: str | None = None
    environment_name: str | None = None


class WorkplaceVerifyResponse(BaseVerifyResponse, WorkplaceVerifyRequest):
    differing_tables: list[str] = Field(default_factory=list, description="Compared states that did not match.")
    predicted_calls: int = 0
    failed_calls: int = Field(default=0, description="Predicted calls skipped because they raised.")
    failed_call_errors: list[str] = Field(default_factory=list, description="Why (first 5).")
    ground_truth_failed_calls: int = Field(
        default=0, description="Ground-truth calls that raised or were refused; when > 0 the sample is masked."
    )
    ground_truth_errors: list[str] = Field(default_factory=list, description="Why (first 5).")
    ground_truth_missing_ids: list[str] = Field(
        default_factory=list, description="Ids the ground truth names that the loaded databases do not hold."
    )
    # NeMo Gym 0.7.0's BaseVerifyResponse fields, same names and types (declared here until ngym's base has them).
    mask_sample: bool = Field(
        default=False, description="True when the reward is not a valid measurement (the ground truth failed)."
    )
    failure_kind: str | None = Field(default=None, description="'verifier_error' when mask_sample is set.")
    failure_reason: str | None = None


def jsonable(value: Any) -> Any:
    """A tool result as JSON: NaN → null, timestamps → 'YYYY-MM-DD HH:MM:SS'."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


class WorkplaceAssistantResourcesServer(SimpleResourcesServer):
    """WorkBench: 27 workplace tools over 5 databases; verified by replaying and matching database states."""

    config: WorkplaceAssistantConfig
    domain: ClassVar[Domain] = Domain.AGENT
    session_affinity_required: ClassVar[bool] = True  # the databases live in this process
    reverify_mode: ClassVar[str] = "stateless"  # verify replays from scratch; the session is not needed

    _data: WorkBenchData | None = None
    _report: ReportOnce | None = None

    @property
    def data(self) -> WorkBenchData:
        """The template databases (loaded on first use, or at startup)."""
        if self._data is None:
            self._data = WorkBenchData.resolve(self.config.data_dir)
        return self._data

    @property
    def report(self) -> ReportOnce:
        """Logs each distinct ground-truth problem once."""
        if self._report is None:
            self._report = ReportOnce()
        return self._report

    async def on_startup(self) -> None:
        warn_about_datasets(
            self.data,
            getattr(self.config, "datasets", None),
            [Path.cwd(), Path(__file__).resolve().parent],
            workbench_strings=self.config.workbench_strings,
        )

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        for spec in TOOLS.values():
            app.post(
                f"/{spec.name}",
                response_model=ToolOutput,
                summary=spec.description,
                tags=["tools (writes)" if spec.writes else "tools (reads)"],
            )(self._tool_route(spec))
        return app

    def _tool_route(self, spec: ToolSpec) -> Any:
        model = request_model(spec)

        async def route(request: Request, body: BaseModel) -> ToolOutput:
            workspace: Workspace = self.session_state(request)
            limit = self.config.max_session_rows
            if spec.writes and workspace.added_rows() >= limit:
                raise HTTPException(
                    413,
                    f"this session has added {workspace.added_rows()} rows to its databases; a session may add at "
                    f"most {limit} (server setting max_session_rows). Reads go on; seed a new session to write more",
                )
            return ToolOutput(output=self.run_tool(workspace, spec.name, body.model_dump(exclude_unset=True)))

        route.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # read by inspect; undeclared on functions
            [
                inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request),
                inspect.Parameter("body", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=model),
            ],
            return_annotation=ToolOutput,
        )
        route.__name__ = spec.name
        return route

    def run_tool(self, workspace: Workspace, name: str, arguments: dict[str, Any]) -> Any:
        """Run one tool call on a session's databases; an error becomes a message the model can read."""
        try:
            call = to_tool_call(
                {"name": name, "arguments": arguments}, workbench_strings=self.config.workbench_strings, live=True
            )
            return jsonable(run_call(workspace, call))
        except Exception as exc:  # noqa: BLE001 - the model gets the error as the tool's output
            return f"Error executing tool '{name}': {error_text(exc, with_type=False)}"

    async def seed_session(self, request: Request, body: WorkplaceSeedSessionRequest) -> BaseSeedSessionResponse:
        problem = truth_problem(self.data, body.ground_truth, workbench_strings=self.config.workbench_strings)
        if problem:  # the rollout may go on; its verify will be masked
            self.report(logging.WARNING, f"seeded a row whose reward will be masked: {problem}")
        self.set_session_state(request, self.data.new_workspace())
        return BaseSeedSessionResponse()

    async def verify(self, request: Request, body: WorkplaceVerifyRequest) -> WorkplaceVerifyResponse:
        predicted = [item for item in body.response.output if getattr(item, "type", None) == "function_call"]
        verdict = score(self.data, predicted, body.ground_truth, workbench_strings=self.config.workbench_strings)
        problems = verdict.ground_truth_problems
        failure: dict[str, Any] = {}
        if problems:
            # Never a silent match with "nothing happened": reward 0.0, and the sample is masked so a trainer
            # neither rewards nor punishes the policy for a row the loaded databases cannot score.
            reason = problem_reason(self.data, problems, verdict.ground_truth_missing_ids)
            self.report(logging.ERROR, f"verify masked a sample: {reason}")
            failure = {"mask_sample": True, "failure_kind": VERIFIER_ERROR, "failure_reason": reason[:2000]}
        return WorkplaceVerifyResponse(
            **(body.model_dump() | failure),
            reward=verdict.reward,
            differing_tables=verdict.differing_tables,
            predicted_calls=verdict.predicted_calls,
            failed_calls=len(verdict.predicted_failed),
            failed_call_errors=[f"#{i} {call}: {err}" for i, call, err in verdict.predicted_failed[:5]],
            ground_truth_failed_calls=len(problems),
            ground_truth_errors=[f"#{i} {call}: {err}" for i, call, err in problems[:5]],
            ground_truth_missing_ids=list(dict.fromkeys(verdict.ground_truth_missing_ids)),
        )

    async def on_session_closed(self, session_id: str, state: Any) -> None:
        if isinstance(state, Workspace):
            state.release()


if __name__ == "__main__":
    WorkplaceAssistantResourcesServer.run_webserver()
