"""The judge environment against scripted judges speaking the real protocols over HTTP on real ports."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ngym.child_server import free_port
from ngym.rollout.replay_model import create_replay_app
from ngym.rollout.thread_server import serve_app_in_thread
from ngym.testing import RolloutClient, app_for, make_response, read_jsonl, replay_examples, serve_in_process

EQUAL, NOT_EQUAL = "[[A=B]]", "[[A!=B]]"


class ScriptedJudge:
    """A judge server: answers each call with the next scripted verdict; records prompts and concurrency."""

    def __init__(self, verdicts: list[str], status: int = 200, delay: float = 0.0) -> None:
        self.verdicts = verdicts
        self.status = status
        self.delay = delay
        self.prompts: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.app = FastAPI()
        self.app.post("/v1/responses")(self.responses)
        self.app.post("/v1/chat/completions")(self.chat)

    async def _verdict(self, prompt: str) -> str:
        self.prompts.append(prompt)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(self.delay)
        self.in_flight -= 1
        return self.verdicts[min(len(self.prompts), len(self.verdicts)) - 1]

    async def responses(self, request: Request) -> Any:
        body = await request.json()
        if self.status != 200:
            return JSONResponse({"error": {"message": "judge broken"}}, status_code=self.status)
        text = await self._verdict(body["input"][-1]["content"])
        return {
            "id": "resp_j",
            "object": "response",
            "created_at": 0.0,
            "model": body["model"],
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {
                    "type": "message",
                    "id": "m",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": f"Thinking... {text}", "annotations": []}],
                },
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }

    async def chat(self, request: Request) -> Any:
        body = await request.json()
        text = await self._verdict(body["messages"][-1]["content"])
        return {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        }


@pytest.fixture
def judge_server() -> Iterator:
    stack: list[Any] = []

    def start(judge: ScriptedJudge) -> str:
        context = serve_app_in_thread(judge.app)
        url = context.__enter__()
        stack.append(context)
        return f"{url}/v1"

    yield start
    for context in reversed(stack):
        context.__exit__(None, None, None)


def _row(answer: str, expected: str = "Paris") -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "What is the capital of France?"}]},
        "question": "What is the capital of France?",
        "expected_answer": expected,
        "response": make_response(text=answer),
    }


async def _verify(fields: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    async with serve_in_process(app_for("equivalence_llm_judge", **fields)) as http:
        return await RolloutClient(http).call("/verify", row)


async def test_equal_scores_one(judge_server) -> None:
    judge = ScriptedJudge([EQUAL])
    result = await _verify({"judge_base_url": judge_server(judge)}, _row("Paris"))
    assert result["reward"] == 1.0
    assert result["judge_evaluations"][0]["verdict"] == EQUAL
    assert "<answer_a>\nParis\n</answer_a>" in judge.prompts[0] and "What is the capital" in judge.prompts[0]


async def test_not_equal_scores_zero(judge_server) -> None:
    result = await _verify({"judge_base_url": judge_server(ScriptedJudge([NOT_EQUAL]))}, _row("Lyon"))
    assert result["reward"] == 0.0 and result["generated_answer"] == "Lyon"
    assert "_ng_failure_class" not in result


async def test_chat_completions_api(judge_server) -> None:
    url = judge_server(ScriptedJudge([EQUAL]))
    result = await _verify({"judge_base_url": url, "judge_api": "chat_completions"}, _row("Paris"))
    assert result["reward"] == 1.0


async def test_no_label_counts_as_not_equal(judge_server) -> None:
    result = await _verify({"judge_base_url": judge_server(ScriptedJudge(["no idea"]))}, _row("Paris"))
    assert result["reward"] == 0.0 and result["judge_evaluations"][0]["verdict"] is None


async def test_swapped_pass_disagreement_gives_the_configured_reward(judge_server) -> None:
    judge = ScriptedJudge([EQUAL, NOT_EQUAL])  # position-biased: agrees first, disagrees when swapped
    fields = {"judge_base_url": judge_server(judge), "check_twice_swap": True, "reward_if_swap_fails": 0.25}
    result = await _verify(fields, _row("Paris, France"))
    assert result["reward"] == 0.25
    assert [e["pass"] for e in result["judge_evaluations"]] == ["first", "swapped"]
    first_a = re.search(r"<answer_a>\n(.*?)\n</answer_a>", judge.prompts[0]).group(1)
    second_a = re.search(r"<answer_a>\n(.*?)\n</answer_a>", judge.prompts[1]).group(1)
    assert (first_a, second_a) == ("Paris", "Paris, France")


async def test_swapped_pass_agreement_scores_one(judge_server) -> None:
    fields = {"judge_base_url": judge_server(ScriptedJudge([EQUAL, EQUAL])), "check_twice_swap": True}
    assert (await _verify(fields, _row("Paris")))["reward"] == 1.0


async def test_judge_down_is_reward_zero_with_failure_class() -> None:
    fields = {"judge_base_url": f"http://127.0.0.1:{free_port()}/v1", "judge_max_retries": 0}
    result = await _verify(fields, _row("Paris"))
    assert result["reward"] == 0.0
    # NeMo Gym 0.7.0's fields, and the older pair it still writes.
    assert result["mask_sample"] is True and result["failure_kind"] == "judge_failed"
    assert "cannot reach the judge" in result["failure_reason"]
    assert result["instance_config"] == {"mask_sample": True}
    assert result["_ng_failure_class"] == "judge_failed"
    assert result["_ng_failure_judge_error"] == result["failure_reason"]


async def test_judge_failure_body_matches_the_declared_response_schema() -> None:
    from resources_servers.equivalence_llm_judge.app import JudgeVerifyResponse

    fields = {"judge_base_url": f"http://127.0.0.1:{free_port()}/v1", "judge_max_retries": 0}
    result = await _verify(fields, _row("Paris"))
    parsed = JudgeVerifyResponse.model_validate(result)
    assert parsed.generated_answer == "Paris" and parsed.judge_evaluations == [] and parsed.mask_sample


async def test_judge_http_error_is_retried_then_a_failure(judge_server) -> None:
    judge = ScriptedJudge([EQUAL], status=503)
    result = await _verify({"judge_base_url": judge_server(judge), "judge_max_retries": 1}, _row("Paris"))
    assert result["reward"] == 0.0 and result["_ng_failure_class"] == "judge_failed"
    assert "HTTP 503" in result["_ng_failure_judge_error"] and "after 2 attempts" in result["_ng_failure_judge_error"]


async def test_concurrency_to_the_judge_is_bounded(judge_server) -> None:
    judge = ScriptedJudge([EQUAL], delay=0.05)
    fields = {"judge_base_url": judge_server(judge), "judge_max_concurrency": 2}
    async with serve_in_process(app_for("equivalence_llm_judge", **fields)) as http:
        results = await asyncio.gather(*(RolloutClient(http).call("/verify", _row("Paris")) for _ in range(8)))
    assert all(r["reward"] == 1.0 for r in results)
    assert judge.max_in_flight == 2


async def test_example_rollouts_with_the_offline_scripted_judge() -> None:
    """The shipped examples replay to their rewards, judged by `ngym replay-model`'s scripted judge over HTTP."""
    from ngym.targets import resolve

    folder = resolve("equivalence_llm_judge").folder
    assert folder is not None
    with serve_app_in_thread(create_replay_app(read_jsonl(folder / "data" / "example_rollouts.jsonl"))) as url:
        results = await replay_examples("equivalence_llm_judge", judge_base_url=f"{url}/v1")
    assert [r.reward for r in results] == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"judge_prompt_template": "{question} {answer}"}, "unknown placeholder(s) {answer}"),
        ({"judge_prompt_template": "{question} {"}, "not a valid format string"),
        ({"judge_prompt_template_fpath": "/no/such/template.txt"}, "cannot read /no/such/template.txt"),
        ({"response_extract_regex": "(unclosed"}, "not a valid regular expression"),
        # the base config's own check still runs beside the judge's (a validator of the same name replaced it)
        ({"session_id_pattern": "(unclosed"}, "not a valid regular expression"),
    ],
)
def test_a_bad_template_or_regex_is_a_config_error_not_a_500_per_verify(fields: dict[str, Any], message: str) -> None:
    from ngym.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        app_for("equivalence_llm_judge", **fields)
    assert message in str(caught.value)


async def test_a_template_file_with_only_known_placeholders_is_used(judge_server, tmp_path) -> None:
    template = tmp_path / "judge.txt"
    template.write_text('Reply as JSON {{"verdict": ...}}. <answer_a>{expected_answer}</answer_a> {equal_label}\n')
    judge = ScriptedJudge([EQUAL])
    fields = {"judge_base_url": judge_server(judge), "judge_prompt_template_fpath": str(template)}
    assert (await _verify(fields, _row("Paris")))["reward"] == 1.0
    assert judge.prompts == ['Reply as JSON {"verdict": ...}. <answer_a>Paris</answer_a> [[A=B]]']
