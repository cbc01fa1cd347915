"""The server in front of the worker: routes, status codes and masking (a scripted stand-in for the worker)."""

from collections.abc import AsyncIterator
from typing import Any

import pytest
from ngym_verifiers import server as server_module
from ngym_verifiers.process import WorkerError, WorkerGone
from ngym_verifiers.records import Record
from ngym_verifiers.server import VerifiersServer

from ngym.testing import RolloutClient, app_for_class, make_response, serve_in_process

RECORD = Record(
    name="fake_env", module="fake_env", python="/nonexistent/python", source="verifiers:fake", distribution=None,
    domain="agent", api="v1",
    tools=[{"name": "add_note", "description": "Add a note.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}],
)  # fmt: skip


class FakeWorker:
    """Answers like the worker; ``fail`` maps an op to the error it raises."""

    def __init__(self) -> None:
        self.fail: dict[str, Exception] = {}
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        self.asked.append((op, fields))
        if op in self.fail:
            raise self.fail[op]
        if op == "seed":
            return {"prompt": [{"role": "user", "content": "hi"}]}
        if op == "tool":
            return {"output": f"noted {fields['arguments'].get('text')}"}
        if op == "verify":
            return {
                "reward": 0.75,
                "rewards": {"a": {"score": 1.0, "weight": 0.75}, "b": {"score": 0.0, "weight": 0.25}},
            }
        return {}

    async def stop(self) -> None:
        pass


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeWorker, Any]]:
    worker = FakeWorker()

    async def start(*args: Any) -> FakeWorker:
        return worker

    original = server_module.Worker.start
    server_module.Worker.start = start  # type: ignore[assignment]
    try:
        async with serve_in_process(app_for_class(VerifiersServer.for_record(RECORD), name="fake_env")) as http:
            yield worker, http
    finally:
        server_module.Worker.start = original  # type: ignore[method-assign]


async def test_a_rollout_seeds_calls_and_scores_function_by_function(fake: tuple[FakeWorker, Any]) -> None:
    worker, http = fake
    client = RolloutClient(http)
    assert (await client.call("/seed_session", {"verifiers": {"idx": 1}}))["prompt"][0]["content"] == "hi"
    assert await client.call("/add_note", {"text": "x"}) == {"output": "noted x"}
    verified = await client.call("/verify", {"responses_create_params": {"input": []}, "response": make_response("x")})
    assert verified["reward"] == 0.75
    assert verified["reward_components"] == {"a": 1.0, "b": 0.0}
    assert verified["reward_weights"] == {"a": 0.75, "b": 0.25}
    seeded = next(fields for op, fields in worker.asked if op == "seed")
    assert seeded["row"] == {"idx": 1}
    messages = next(fields for op, fields in worker.asked if op == "verify")["messages"]
    assert messages == [{"role": "assistant", "content": "x"}]
    assert ("close", {"session": seeded["session"]}) in worker.asked  # closed after verify, once


async def test_a_tool_before_seeding_is_409(fake: tuple[FakeWorker, Any]) -> None:
    _, http = fake
    response = await RolloutClient(http).post("/add_note", {"text": "x"})
    assert response.status_code == 409


@pytest.mark.parametrize(
    ("error", "status"),
    [(WorkerError("bad_request", "no tool 'x'"), 422), (WorkerError("failed", "KeyError: 'x'"), 502),
     (WorkerGone("the verifiers worker exited (code -9)"), 503)],
)  # fmt: skip
async def test_tool_errors_have_their_status(fake: tuple[FakeWorker, Any], error: Exception, status: int) -> None:
    worker, http = fake
    client = RolloutClient(http)
    await client.call("/seed_session", {})
    worker.fail["tool"] = error
    response = await client.post("/add_note", {"text": "x"})
    assert response.status_code == status
    assert str(error) in response.json()["detail"]


async def test_reward_code_that_fails_is_a_masked_sample_not_a_zero(fake: tuple[FakeWorker, Any]) -> None:
    worker, http = fake
    client = RolloutClient(http)
    await client.call("/seed_session", {})
    worker.fail["verify"] = WorkerError("failed", "TaskError: task VfNotesTask scoring: ZeroDivisionError")
    verified = await client.call("/verify", {"responses_create_params": {"input": []}, "response": make_response("x")})
    assert verified["mask_sample"] is True
    assert verified["failure_kind"] == "verifier_error"
    assert "ZeroDivisionError" in verified["failure_reason"]


async def test_verify_without_a_seeded_rollout_is_masked(fake: tuple[FakeWorker, Any]) -> None:
    _, http = fake
    verified = await RolloutClient(http).call(
        "/verify", {"responses_create_params": {"input": []}, "response": make_response("x")}
    )
    # ngym's own lost-session rule answers first (a stateful environment's verify read a session it never seeded)
    assert verified["mask_sample"] is True and verified["failure_kind"] == "session_lost"
    assert "never seeded" in verified["failure_reason"]
