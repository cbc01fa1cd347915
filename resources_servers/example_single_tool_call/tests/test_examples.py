"""The recorded example rollouts replay to their recorded rewards; the verifier cases hold."""

import json
from pathlib import Path

from ngym.testing import app_for, replay_examples, serve_in_process

CASES = Path(__file__).with_name("verifier_cases.jsonl")


async def test_example_rollouts_replay() -> None:
    results = await replay_examples("example_single_tool_call")
    # Five rollouts call get_weather (1.0); the last answers from memory without calling it (0.0).
    assert [r.reward for r in results] == [1.0] * 5 + [0.0]


async def test_verifier_cases() -> None:
    """The same cases NeMo Gym's VerifierFixture runs in the conformance suite, checked in-process here."""
    cases = [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
    async with serve_in_process(app_for("example_single_tool_call")) as http:
        for case in cases:
            answer = await http.post("/verify", json=case["request"])
            if case["kind"] == "malformed":
                assert answer.status_code == 422 and case["expected_error"] in answer.text
            else:
                assert answer.json()["reward"] == case["expected_reward"], case["name"]
    assert {c["kind"] for c in cases} == {"full_reward", "zero_reward", "malformed"}
