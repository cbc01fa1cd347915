"""Schemathesis against every built-in server's OpenAPI, on real ``ngym run`` processes: no unexpected 5xx.

Two passes per server (``make fuzz``; ``.ci/run`` runs it):

- stateless: the ``schemathesis run`` CLI over every operation (examples, coverage and fuzzing phases,
  valid and invalid bodies), with only the ``not_a_server_error`` check: a 4xx for a bad body is the
  contract, a 5xx is a bug (the protocol allows a 500 only from an environment's own exception);
- stateful: a Hypothesis state machine that does what an agent does, with schemathesis drawing the bodies:
  seed a real session with one of the environment's example rows (dataset-row or NeMo Gym 0.7 typed seed),
  call the tools with its cookie, verify (with schema-drawn bodies and with a valid one), close; every
  answer below 500, and the seeded calls that must work do.

The LLM judge server is pointed at the scripted judge over HTTP (``ngym replay-model``). The budget is set
by ``NGYM_FUZZ_EXAMPLES`` (per operation, default 20) and ``NGYM_FUZZ_STEPS`` (state machine runs, default
15); the seed by ``NGYM_FUZZ_SEED`` (default fixed, so CI is reproducible).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test
from schemathesis import GenerationMode

from ngym.child_server import free_port, wait_healthy
from ngym.examples import read_jsonl
from ngym.targets import installed
from ngym.testing import make_response

pytestmark = pytest.mark.fuzz

SERVERS = [
    "example_single_tool_call",
    "example_session_state_mgmt",
    "workplace_assistant",
    "math_with_code",
    "equivalence_llm_judge",
]
STANDARD = {"/seed_session", "/verify", "/close_session", "/aggregate_metrics"}
EXAMPLES = int(os.environ.get("NGYM_FUZZ_EXAMPLES", "20"))
STEPS = int(os.environ.get("NGYM_FUZZ_STEPS", "15"))
SEED = int(os.environ.get("NGYM_FUZZ_SEED", "20261123"))
BIN = Path(sys.executable).parent
JSON = {"content-type": "application/json"}
#: Caller-chosen session ids: any text (lone surrogates, controls and all), and the ones outside testing used.
ANY_ID = st.text(st.characters(codec=None, exclude_categories=()), max_size=300) | st.sampled_from(
    ["a;b", "a,b", 'a"b', "a\tb", "é", "a\r\nX-Evil: 1", "x" * 9000, "\ud800"]
)


@dataclass
class Fleet:
    urls: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def start(self, name: str, cmd: list[str], port: int, ready: str = "/") -> str:
        log = open(os.devnull, "w")  # noqa: SIM115 - the process owns it
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, 60, path=ready)
        self.urls[name] = url
        return url


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    started = Fleet()
    try:
        judge_port = free_port()
        judge_cmd = [str(BIN / "ngym"), "replay-model", "--port", str(judge_port)]
        judge = started.start("judge", judge_cmd, judge_port, ready="/v1/models")
        for name in SERVERS:
            port = free_port()
            cmd = [str(BIN / "ngym"), "run", name, "--port", str(port)]
            if name == "equivalence_llm_judge":
                cmd.append(f"judge_base_url={judge}/v1")
            started.start(name, cmd, port)
        yield started
    finally:
        for proc in started.procs:
            proc.terminate()
        for proc in started.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("name", SERVERS)
def test_no_operation_answers_5xx(fleet: Fleet, name: str, tmp_path: Path) -> None:
    cmd = [
        str(BIN / "schemathesis"),
        "run",
        f"{fleet.urls[name]}/openapi.json",
        "--checks=not_a_server_error",
        "--continue-on-failure",
        "--phases=examples,coverage,fuzzing",
        f"--max-examples={EXAMPLES}",
        f"--seed={SEED}",
        "--workers=1",
        "--generation-database=none",
        "--no-color",
        "--suppress-health-check=all",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "generated" in run.stdout  # it did test something


def example_rows(name: str) -> list[dict[str, Any]]:
    folder = installed(name).folder
    assert folder is not None
    return read_jsonl(folder / "data" / "example.jsonl")[:5]


def machine_for(url: str, rows: list[dict[str, Any]]) -> type[RuleBasedStateMachine]:
    """An agent's life on one server, with schemathesis drawing the bodies of tools and verify."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    tools = [op for op in operations if op.method.upper() == "POST" and op.path not in STANDARD]
    verify = next(op for op in operations if op.path == "/verify")
    modes = st.sampled_from([GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
    http = httpx.Client(base_url=url, timeout=120)

    class Rollout(RuleBasedStateMachine):
        #: Status codes the tools answered, across runs: the test checks that seeded calls got through.
        tool_statuses: list[int] = []

        def __init__(self) -> None:
            super().__init__()
            self.cookie: str | None = None
            self.row: dict[str, Any] = {}
            self.typed_id: str | None = None

        def send(self, path: str, body: Any = None, case: Any = None) -> httpx.Response:
            headers = {"cookie": self.cookie} if self.cookie else {}
            if case is not None:
                response = case.call(base_url=url, headers=headers)
                status, text, set_cookie = response.status_code, response.text, response.headers.get("set-cookie")
                if isinstance(set_cookie, list):
                    set_cookie = set_cookie[0] if set_cookie else None
                shown = f"{case.method} {case.path} {str(case.body)[:500]!r}"
            else:  # json.dumps escapes non-ASCII, so even a lone surrogate goes out as its \\u escape
                answer = http.post(path, content=json.dumps(body), headers={**headers, **JSON})
                status, text, set_cookie = answer.status_code, answer.text, answer.headers.get("set-cookie")
                shown = f"POST {path} {json.dumps(body)[:500]}"
            assert status < 500, f"{shown} → {status}: {text[:1000]}"
            if set_cookie:
                self.cookie = set_cookie.split(";", 1)[0]
            return httpx.Response(status, text=text)

        @initialize(index=st.integers(0, len(rows) - 1), typed=st.booleans(), data=st.data())
        def seed(self, index: int, typed: bool, data: st.DataObject) -> None:
            self.row = rows[index]
            if typed:
                self.typed_id = f"resources-session-{uuid.uuid4().hex}"
                body = {
                    "resources_session_id": self.typed_id,
                    "episode_id": {"rollout_id": self.typed_id, "attempt": 0},
                    "task_id": {"taskset": "fuzz", "task_id": str(index)},
                    "task_data": self.row,
                }
                seeded = self.send("/seed_session", body)
            else:
                seeded = self.send("/seed_session", self.row)
            assert seeded.status_code == 200, seeded.text
            if tools:  # one schema-valid call in the fresh session, whatever the derandomised draws do after it
                operation = data.draw(st.sampled_from(tools))
                case = data.draw(operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
                self.tool_statuses.append(self.send(operation.path, case=case).status_code)

        @rule(data=st.data())
        def call_tool(self, data: st.DataObject) -> None:
            if not tools:
                return
            operation = data.draw(st.sampled_from(tools))
            case = data.draw(operation.as_strategy(generation_mode=data.draw(modes)))
            self.tool_statuses.append(self.send(operation.path, case=case).status_code)

        @rule(data=st.data())
        def verify_drawn(self, data: st.DataObject) -> None:
            case = data.draw(verify.as_strategy(generation_mode=data.draw(modes)))
            self.send("/verify", case=case)

        @rule(text=st.text(max_size=50))
        def verify_row(self, text: str) -> None:
            verified = self.send("/verify", {**self.row, "response": make_response(text=f"\\boxed{{{text}}}")})
            assert verified.status_code in (200, 409), verified.text  # 409: an earlier verify closed it
            if verified.status_code == 200:
                assert 0.0 <= verified.json()["reward"] <= 1.0

        @rule(session_id=ANY_ID, rollout_id=ANY_ID)
        def typed_seed_and_close_any_id(self, session_id: str, rollout_id: str) -> None:
            episode = {"rollout_id": rollout_id, "attempt": 0}
            task = {"taskset": "fuzz", "task_id": "any"}
            body = {"resources_session_id": session_id, "episode_id": episode, "task_id": task, "task_data": self.row}
            seeded = httpx.post(f"{url}/seed_session", content=json.dumps(body), headers=JSON, timeout=120)
            assert seeded.status_code < 500, f"typed seed {session_id!r} → {seeded.status_code}: {seeded.text[:500]}"
            closing = {"resources_session_id": session_id, "episode_id": episode}
            closed = httpx.post(f"{url}/close_session", content=json.dumps(closing), headers=JSON, timeout=120)
            assert closed.status_code < 500, f"close {session_id!r} → {closed.status_code}: {closed.text[:500]}"

        @rule()
        def close(self) -> None:
            if self.typed_id is not None:
                episode = {"rollout_id": self.typed_id, "attempt": 0}
                closed = self.send("/close_session", {"resources_session_id": self.typed_id, "episode_id": episode})
            else:
                closed = self.send("/close_session", {})
            assert closed.status_code == 200, closed.text

        def teardown(self) -> None:
            self.close()

    return Rollout


@pytest.mark.parametrize("name", SERVERS)
def test_seeded_rollouts_with_fuzzed_tools_and_verify_never_answer_5xx(fleet: Fleet, name: str) -> None:
    machine = machine_for(fleet.urls[name], example_rows(name))
    budget = settings(
        max_examples=STEPS,
        stateful_step_count=8,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    run_state_machine_as_test(machine, settings=budget)
    statuses = machine.tool_statuses  # type: ignore[attr-defined]
    if name != "equivalence_llm_judge":  # the judge has no tools
        assert any(200 <= status < 300 for status in statuses), f"no tool call got through a seeded session: {statuses}"
