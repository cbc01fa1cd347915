"""A scripted judge: an OpenAI-compatible model server (``/v1/responses``, ``/v1/chat/completions``,
``/v1/models``) that answers every request with one fixed text. ``ngym scripted-judge TEXT`` serves it.

An environment whose ``verify`` asks a judge model (math_with_judge, equivalence_llm_judge, …) runs its whole
verify path against it offline: prompt building, the HTTP call, parsing the verdict, the reward. Give it the
verdict the environment parses as "equal" (``[[A=B]]`` for NeMo Gym's equivalence judges) and every judged row
scores as if the judge agreed; give it the "not equal" label to check the other branch. ``ngym replay-model``
differs: it answers recorded inputs only (HTTP 400 "no recording for this input" for a judge prompt it was not
recorded with), and judges only prompts written in ngym's ``<answer_a>``/``<answer_b>`` template.
``GET /calls`` says how many requests it answered.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI


def responses_answer(text: str, number: int, model: str = "scripted-judge") -> dict[str, Any]:
    """The OpenAI Responses API answer (``POST /v1/responses``) carrying ``text``; ``number`` makes its ids."""
    return {
        "id": f"resp_scripted_{number}",
        "object": "response",
        "created_at": time.time(),
        "model": model,
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": f"msg_scripted_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 1,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2,
        },
    }


def chat_answer(text: str, number: int, model: str = "scripted-judge") -> dict[str, Any]:
    """The OpenAI chat-completions answer (``POST /v1/chat/completions``) carrying ``text``."""
    return {
        "id": f"chatcmpl-scripted-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


MODELS_ANSWER: dict[str, Any] = {
    "object": "list",
    "data": [{"id": "scripted-judge", "object": "model", "created": 0, "owned_by": "ngym"}],
}
"""The answer to ``GET /v1/models``."""


def create_judge_app(text: str) -> FastAPI:
    """The app answering every judge request with ``text``."""
    app = FastAPI(title="scripted judge")
    calls: list[str] = []

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return MODELS_ANSWER

    @app.post("/v1/responses")
    async def responses(body: dict[str, Any]) -> dict[str, Any]:
        calls.append("responses")
        return responses_answer(text, len(calls), body.get("model") or "scripted-judge")

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        calls.append("chat")
        return chat_answer(text, len(calls), body.get("model") or "scripted-judge")

    @app.get("/calls")
    async def count() -> dict[str, int]:
        return {"calls": len(calls)}

    return app


__all__ = ["MODELS_ANSWER", "chat_answer", "create_judge_app", "responses_answer"]
