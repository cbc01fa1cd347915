"""A NeMo Gym LLM-judge environment, unchanged, calling its judge by name through ngym's ServerClient.

NeMo Gym's own ``equivalence_llm_judge`` (from its wheel) is served by ngym in process; its judge model
``judge_model`` is ngym's replay model (a scripted judge) on a real socket, named through
``set_server_urls`` as ``ngym run --model-url judge_model=URL`` does. A judge that is down or not configured
gives HTTP 200 with reward 0.0 and the judge-failure fields, never a 500.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nemo_gym.server_utils import close_client_session
from ngym_nemo_gym.servers import set_server_urls

from ngym.rollout.replay_model import create_replay_app
from ngym.testing import app_for_class, make_response, serve_in_process

from .conftest import serve_on_socket

# The scripted judge reads the two answers between these tags and answers [[A=B]] or [[A!=B]].
TEMPLATE = "Question: {question}\n<answer_a>{expected_answer}</answer_a>\n<answer_b>{generated_answer}</answer_b>\n"


@pytest.fixture
def judge_env(import_nemo_app: Any, tmp_path: Path) -> tuple[Any, Path]:
    template = tmp_path / "template.txt"
    template.write_text(TEMPLATE)
    return import_nemo_app("equivalence_llm_judge"), template


def _app(module: Any, template: Path) -> Any:
    return app_for_class(
        module.LLMJudgeResourcesServer,
        name="equivalence_llm_judge",
        domain="knowledge",
        judge_model_server={"type": "responses_api_models", "name": "judge_model"},
        judge_responses_create_params={"input": []},
        judge_prompt_template_fpath=str(template),
    )


def _verify_body(answer: str) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "Who proposed natural selection?"}]},
        "question": "Who proposed natural selection?",
        "expected_answer": "Darwin",
        "response": make_response(answer),
    }


@pytest.mark.usefixtures("clean_server_env")
async def test_the_judge_is_called_by_name_and_decides_the_reward(judge_env: Any) -> None:
    module, template = judge_env
    with serve_on_socket(create_replay_app()) as judge_url:
        set_server_urls({"judge_model": f"{judge_url}/v1"})
        async with serve_in_process(_app(module, template)) as client:
            right = await client.post("/verify", json=_verify_body("Darwin"))
            wrong = await client.post("/verify", json=_verify_body("Lamarck"))
    assert right.status_code == 200, right.text
    assert right.json()["reward"] == 1.0
    assert right.json()["mask_sample"] is False
    assert wrong.status_code == 200, wrong.text
    assert wrong.json()["reward"] == 0.0
    assert wrong.json()["mask_sample"] is False  # a wrong answer is a measurement, not a failure


@pytest.mark.usefixtures("clean_server_env")
async def test_a_judge_that_is_down_is_a_masked_zero_not_a_500(judge_env: Any) -> None:
    module, template = judge_env
    with serve_on_socket(create_replay_app()) as judge_url:
        pass  # the port is free again: nothing listens there now
    set_server_urls({"judge_model": judge_url})
    async with serve_in_process(_app(module, template)) as client:
        answer = await client.post("/verify", json=_verify_body("Darwin"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["reward"] == 0.0
    assert body["mask_sample"] is True
    assert body["failure_kind"] == "judge_failed"
    assert "127.0.0.1" in body["failure_reason"]


@pytest.mark.usefixtures("clean_server_env")
async def test_an_unconfigured_judge_name_says_how_to_configure_it(judge_env: Any) -> None:
    module, template = judge_env
    async with serve_in_process(_app(module, template)) as client:
        answer = await client.post("/verify", json=_verify_body("Darwin"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["reward"], body["mask_sample"], body["failure_kind"]) == (0.0, True, "judge_failed")
    assert "--model-url judge_model=URL" in body["failure_reason"]


@pytest.mark.usefixtures("clean_server_env")
async def test_a_judge_answering_an_http_error_is_a_masked_zero(judge_env: Any, tmp_path: Path) -> None:
    module, _ = judge_env
    untagged = tmp_path / "untagged.txt"
    untagged.write_text("Is {generated_answer} the same as {expected_answer}?")  # the replay model answers 400
    with serve_on_socket(create_replay_app()) as judge_url:
        set_server_urls({"judge_model": judge_url})
        async with serve_in_process(_app(module, untagged)) as client:
            answer = await client.post("/verify", json=_verify_body("Darwin"))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["reward"], body["mask_sample"], body["failure_kind"]) == (0.0, True, "judge_failed")
    assert body["failure_reason"].startswith("ClientResponseError: 400")


async def test_nemo_async_openai_client_talks_to_an_openai_compatible_server() -> None:
    from aiohttp import ClientResponseError
    from nemo_gym.openai_utils import NeMoGymAsyncOpenAI

    with serve_on_socket(create_replay_app()) as url:
        client = NeMoGymAsyncOpenAI(base_url=f"{url}/v1", api_key="test-key")
        prompt = "<answer_a>Paris</answer_a> <answer_b>paris</answer_b>"
        completion = await client.create_chat_completion(messages=[{"role": "user", "content": prompt}])
        assert "[[A=B]]" in completion["choices"][0]["message"]["content"]
        with pytest.raises(ClientResponseError) as failed:  # the replay model answers other prompts with 400
            await client.create_chat_completion(messages=[{"role": "user", "content": "hello"}])
        await close_client_session()
    assert failed.value.status == 400
